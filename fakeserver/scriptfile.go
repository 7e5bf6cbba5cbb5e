package fakeserver

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxScriptSize bounds a script file.
const maxScriptSize = 1 << 20

// maxScriptRules bounds the rules of one script file.
const maxScriptRules = 10000

// LoadScriptFile reads a JSON script file (see [LoadScript]). Errors name
// the file; a *LoadError inside is found with errors.As.
func LoadScriptFile(path string) (*Script, error) { return loadFile(path, LoadScript) }

// LoadScript reads a JSON script (the format is in docs/fakeserver.md); a
// bad one, an unknown field included (a typo must not script nothing), is
// a [*LoadError].
func LoadScript(r io.Reader) (*Script, error) {
	data, err := readLimited(r, maxScriptSize, "script")
	if err != nil {
		return nil, err
	}
	var rules []Rule
	doc := &jsonDoc{doc: "script", data: data, maxEntries: maxScriptRules}
	if e := doc.read(`a script is a JSON object: {"rules": [...]}`, map[string]func([]byte) *LoadError{
		"rules": entry(&rules, (*ruleJSON).rule, func(r Rule, _ []Rule) *LoadError {
			if field, err := r.validate(); err != nil {
				return pathErr(field, err.Error())
			}
			return nil
		}),
	}); e != nil {
		return nil, e
	}
	if !doc.seen["rules"] {
		return nil, &LoadError{Doc: "script", Line: 1, Column: 1, Msg: `missing "rules"`}
	}
	return NewScript(rules...), nil // validated: NewScript does not panic
}

// ruleJSON is one rule of a script file. A pointer field is one whose
// presence matters.
type ruleJSON struct {
	Comment     string          `json:"comment"`
	Route       *string         `json:"route"`
	Method      string          `json:"method"`
	PathPrefix  string          `json:"path_prefix"`
	Nth         *int64          `json:"nth"`
	Times       *int64          `json:"times"`
	Always      bool            `json:"always"`
	Window      *windowJSON     `json:"window"`
	TokenBucket *bucketJSON     `json:"token_bucket"`
	Fault       *string         `json:"fault"`
	Status      *int64          `json:"status"`
	Location    *string         `json:"location"`
	RetryAfter  *retryAfterJSON `json:"retry_after"`
	BodySize    *int64          `json:"body_size"`
	Chunk       *int64          `json:"chunk"`
	Delay       *string         `json:"delay"`
}

// windowJSON, bucketJSON and retryAfterJSON are a rule's "window",
// "token_bucket" and "retry_after" (their keys are in docs/fakeserver.md).
type windowJSON struct {
	Start    string  `json:"start"`
	Duration *string `json:"duration"`
}

type bucketJSON struct {
	Rate  *float64 `json:"rate"`
	Burst *int64   `json:"burst"`
	Key   string   `json:"key"`
	Quota string   `json:"quota_headers"`
}

type retryAfterJSON struct {
	Form    *string  `json:"form"`
	Seconds *int64   `json:"seconds"`
	Values  []string `json:"values"`
	Size    *int64   `json:"size"`
}

// fields says which specific keys a fault or a Retry-After form takes,
// and which of them it requires.
type fields struct{ allowed, required []string }

// faultFields are each fault's keys (a throttle's retry_after is required
// with a message of its own).
var faultFields = map[string]fields{
	"throttle":     {[]string{"retry_after", "body_size"}, nil},
	"status":       {[]string{"status", "body_size"}, []string{"status"}},
	"redirect":     {[]string{"status", "location"}, []string{"status", "location"}},
	"slow_body":    {[]string{"chunk", "delay"}, []string{"chunk", "delay"}},
	"stalled_body": {},
	"reset":        {},
	"server_busy":  {[]string{"body_size"}, nil},
}

func (rj *ruleJSON) rule() (Rule, *LoadError) {
	r := Rule{Method: strings.ToUpper(rj.Method), PathPrefix: rj.PathPrefix, Always: rj.Always}
	if rj.Route == nil {
		return r, pathErr("route", "required")
	}
	r.Route = *rj.Route
	var e *LoadError
	if r.Nth, e = positive("nth", rj.Nth); e != nil {
		return r, e
	}
	if r.Times, e = positive("times", rj.Times); e != nil {
		return r, e
	}
	if rj.Window != nil {
		if r.Window, e = rj.Window.window(); e != nil {
			return r, e
		}
	}
	if rj.TokenBucket != nil {
		if r.Bucket, e = rj.TokenBucket.bucket(); e != nil {
			return r, e
		}
	}
	if rj.Fault == nil {
		return r, pathErr("fault", "required")
	}
	kind := *rj.Fault
	allowed, ok := faultFields[kind]
	if !ok {
		return r, pathErr("fault", fmt.Sprintf("unknown fault %q (want one of %s)", kind, strings.Join(slices.Sorted(maps.Keys(faultFields)), ", ")))
	}
	if e := allowed.check("", "a "+kind+" fault", field{"status", rj.Status != nil}, field{"location", rj.Location != nil},
		field{"retry_after", rj.RetryAfter != nil}, field{"body_size", rj.BodySize != nil}, field{"chunk", rj.Chunk != nil},
		field{"delay", rj.Delay != nil}); e != nil {
		return r, e
	}
	r.Fault, e = rj.fault(kind)
	return r, e
}

func positive(name string, n *int64) (int, *LoadError) {
	switch {
	case n == nil:
		return 0, nil
	case *n < 1:
		return 0, pathErr(name, "must be at least 1")
	case *n > 1<<30:
		return 0, pathErr(name, fmt.Sprintf("%d out of range [1, %d]", *n, 1<<30))
	}
	return int(*n), nil
}

func (rj *ruleJSON) fault(kind string) (Fault, *LoadError) {
	var (
		f     Fault
		err   error  // a constructor's, about field
		field string // the one at fault
	)
	switch kind {
	case "throttle":
		if rj.RetryAfter == nil {
			return Fault{}, pathErr("retry_after", `a throttle needs a retry_after (use {"form": "missing"} for none)`)
		}
		ra, e := rj.RetryAfter.retryAfter()
		if e != nil {
			return Fault{}, e
		}
		f = Throttle(ra)
	case "status":
		f, err = newStatus(int(*rj.Status))
		field = "status"
	case "redirect":
		code := *rj.Status
		f, err = newRedirect(int(code), *rj.Location)
		field = "status"
		if code >= 300 && code < 400 {
			field = "location"
		}
	case "slow_body":
		d, perr := time.ParseDuration(*rj.Delay)
		if perr != nil {
			return Fault{}, pathErr("delay", fmt.Sprintf("want a Go duration such as \"100ms\", got %q", *rj.Delay))
		}
		if chunk := *rj.Chunk; chunk < 1 || chunk > maxFaultBodySize {
			return Fault{}, pathErr("chunk", fmt.Sprintf("chunk %d out of range [1, %d]", chunk, maxFaultBodySize))
		}
		f, err = newSlowBody(int(*rj.Chunk), d)
		field = "delay"
	case "stalled_body":
		f = StalledBody()
	case "server_busy":
		f = ServerBusy()
	default: // "reset"
		f = ConnectionReset()
	}
	// Only the kinds that take a body_size have one (faultFields); its
	// range is checked here.
	if err == nil && rj.BodySize != nil {
		f, err = f.withBodySize(int(*rj.BodySize))
		field = "body_size"
	}
	if err != nil {
		return Fault{}, pathErr(field, err.Error())
	}
	return f, nil
}

// retryAfterFields are each form's keys besides "form".
var retryAfterFields = map[string]fields{
	formSeconds: {seconds, seconds}, string(IMFFixdate): {seconds, seconds}, string(RFC850): {seconds, seconds},
	string(Asctime): {seconds, seconds}, formOverlong: {seconds, nil}, formRaw: {values, values},
	formDuplicate: {values, values}, formMissing: {}, formOversized: {[]string{"size"}, nil},
	formRemaining: {}, formRemainingMs: {},
}

var seconds, values = []string{"seconds"}, []string{"values"}

func (rj *retryAfterJSON) retryAfter() (RetryAfter, *LoadError) {
	if rj.Form == nil {
		return RetryAfter{}, pathErr("retry_after.form", "required")
	}
	form := *rj.Form
	spec, ok := retryAfterFields[form]
	if !ok {
		return RetryAfter{}, pathErr("retry_after.form",
			fmt.Sprintf("unknown Retry-After form %q (want one of %s)", form, strings.Join(retryAfterForms, ", ")))
	}
	if e := spec.check("retry_after.", "the "+form+" form", field{"seconds", rj.Seconds != nil}, field{"values", rj.Values != nil},
		field{"size", rj.Size != nil}); e != nil {
		return RetryAfter{}, e
	}
	ra := RetryAfter{form: form}
	switch form {
	case formSeconds, formOverlong:
		ra.seconds = 60 // the overlong default
		if rj.Seconds != nil {
			ra.seconds = *rj.Seconds
		}
		if ra.seconds < 0 {
			return RetryAfter{}, pathErr("retry_after.seconds", "must not be negative (use the raw form for \"-1\")")
		}
	case string(IMFFixdate), string(RFC850), string(Asctime):
		if ra.seconds = *rj.Seconds; ra.seconds < -1e9 || ra.seconds > 1e9 {
			return RetryAfter{}, pathErr("retry_after.seconds", "out of range [-1e9, 1e9]")
		}
	case formRaw, formDuplicate:
		ra.values = rj.Values
		switch {
		case form == formRaw && len(ra.values) != 1:
			return RetryAfter{}, pathErr("retry_after.values", "the raw form takes exactly one value (use duplicate for more)")
		case form == formDuplicate && len(ra.values) < 2:
			return RetryAfter{}, pathErr("retry_after.values", "the duplicate form takes two or more values")
		}
		if err := checkRawValues(ra.values); err != nil {
			return RetryAfter{}, pathErr("retry_after.values", err.Error())
		}
	case formOversized:
		n := int64(200)
		if rj.Size != nil {
			n = *rj.Size
		}
		if n < 1 || n > 64<<10 {
			return RetryAfter{}, pathErr("retry_after.size", "out of range [1, 65536]")
		}
		ra.size = int(n)
	} // missing, remaining, remaining-ms: the form alone
	return ra, nil
}

func (wj *windowJSON) window() (TimeWindow, *LoadError) {
	var w TimeWindow
	if wj.Start != "" {
		t, err := time.Parse(time.RFC3339Nano, wj.Start)
		if err != nil {
			return w, pathErr("window.start", fmt.Sprintf("want an RFC 3339 time such as \"2026-12-01T10:00:00Z\", got %q", wj.Start))
		}
		w.Start = t
	}
	if wj.Duration == nil {
		return w, pathErr("window.duration", "required")
	}
	d, err := time.ParseDuration(*wj.Duration)
	if err != nil {
		return w, pathErr("window.duration", fmt.Sprintf("want a Go duration such as \"2s\", got %q", *wj.Duration))
	}
	if d <= 0 {
		return w, pathErr("window.duration", "the duration must be above 0")
	}
	w.Duration = d
	return w, nil
}

func (bj *bucketJSON) bucket() (Bucket, *LoadError) {
	switch {
	case bj.Rate == nil:
		return Bucket{}, pathErr("token_bucket.rate", "required")
	case bj.Burst == nil:
		return Bucket{}, pathErr("token_bucket.burst", "required")
	case *bj.Burst < 1 || *bj.Burst > maxBucketBurst:
		return Bucket{}, pathErr("token_bucket.burst", fmt.Sprintf("burst %d out of range [1, %d]", *bj.Burst, maxBucketBurst))
	}
	// The rate's range and the key are checked by validate.
	return Bucket{Rate: *bj.Rate, Burst: int(*bj.Burst), Key: BucketKey(bj.Key), Quota: QuotaForm(bj.Quota)}, nil
}

// field is a key of a decoded entry and whether it was given.
type field struct {
	name    string
	present bool
}

// check refuses the first field given that fs does not allow ("not a field
// of " + what), then the first it requires that is missing; path prefixes
// the field's name.
func (fs fields) check(path, what string, given ...field) *LoadError {
	for _, f := range given {
		if f.present && !slices.Contains(fs.allowed, f.name) {
			return pathErr(path+f.name, "not a field of "+what)
		}
	}
	for _, f := range given {
		if !f.present && slices.Contains(fs.required, f.name) {
			return pathErr(path+f.name, "required")
		}
	}
	return nil
}
