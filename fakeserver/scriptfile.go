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

// LoadScript reads a JSON script (the format is in the package
// documentation). A bad script returns a *LoadError naming the rule and
// field ("rules[2].retry_after.form") with a line and column. Unknown
// fields are errors, so that a typo does not silently script nothing.
func LoadScript(r io.Reader) (*Script, error) {
	data, err := readLimited(r, maxScriptSize, "script")
	if err != nil {
		return nil, err
	}
	s := &Script{}
	doc := &jsonDoc{doc: "script", data: data, maxEntries: maxScriptRules}
	if e := doc.read(`a script is a JSON object: {"rules": [...]}`, map[string]func(int, []byte) *LoadError{
		"rules": func(_ int, raw []byte) *LoadError {
			var rj ruleJSON
			if e := decodeStrict(raw, &rj); e != nil {
				return e
			}
			rule, e := rj.rule()
			if e != nil {
				return e
			}
			if field, err := rule.validate(); err != nil {
				return pathErr(field, err.Error())
			}
			s.rules = append(s.rules, &ruleState{Rule: rule})
			return nil
		},
	}); e != nil {
		return nil, e
	}
	if !doc.seen["rules"] {
		return nil, &LoadError{Doc: "script", Line: 1, Column: 1, Msg: `missing "rules"`}
	}
	return s, nil
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

// windowJSON is {"start": RFC 3339 time (optional), "duration": Go
// duration}.
type windowJSON struct {
	Start    string  `json:"start"`
	Duration *string `json:"duration"`
}

// bucketJSON is {"rate": tokens per second, "burst": N, "key": "account",
// "host", "subscription" or "deployment" (optional), "quota_headers":
// "openai" or "arm" (optional)}.
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

// faultFields says which fault-specific keys each fault takes.
var faultFields = map[string][]string{
	"throttle":     {"retry_after", "body_size"},
	"status":       {"status", "body_size"},
	"redirect":     {"status", "location"},
	"slow_body":    {"chunk", "delay"},
	"stalled_body": {},
	"reset":        {},
	"server_busy":  {"body_size"},
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
	if k := extraField(allowed, field{"status", rj.Status != nil}, field{"location", rj.Location != nil}, field{"retry_after", rj.RetryAfter != nil},
		field{"body_size", rj.BodySize != nil}, field{"chunk", rj.Chunk != nil}, field{"delay", rj.Delay != nil}); k != "" {
		return r, pathErr(k, fmt.Sprintf("not a field of a %s fault", kind))
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
	switch kind {
	case "throttle":
		if rj.RetryAfter == nil {
			return Fault{}, pathErr("retry_after", `a throttle needs a retry_after (use {"form": "missing"} for none)`)
		}
		ra, e := rj.RetryAfter.retryAfter()
		if e != nil {
			return Fault{}, e
		}
		return rj.sized(Throttle(ra))
	case "status":
		if rj.Status == nil {
			return Fault{}, pathErr("status", "required")
		}
		f, err := newStatus(int(*rj.Status))
		if err != nil {
			return Fault{}, pathErr("status", err.Error())
		}
		return rj.sized(f)
	case "redirect":
		if rj.Status == nil {
			return Fault{}, pathErr("status", "required")
		}
		if rj.Location == nil {
			return Fault{}, pathErr("location", "required")
		}
		code := *rj.Status
		f, err := newRedirect(int(code), *rj.Location)
		if err != nil {
			field := "status"
			if code >= 300 && code < 400 {
				field = "location"
			}
			return Fault{}, pathErr(field, err.Error())
		}
		return f, nil
	case "slow_body":
		if rj.Chunk == nil {
			return Fault{}, pathErr("chunk", "required")
		}
		if rj.Delay == nil {
			return Fault{}, pathErr("delay", "required")
		}
		d, err := time.ParseDuration(*rj.Delay)
		if err != nil {
			return Fault{}, pathErr("delay", fmt.Sprintf("want a Go duration such as \"100ms\", got %q", *rj.Delay))
		}
		if chunk := *rj.Chunk; chunk < 1 || chunk > maxFaultBodySize {
			return Fault{}, pathErr("chunk", fmt.Sprintf("chunk %d out of range [1, %d]", chunk, maxFaultBodySize))
		}
		f, err := newSlowBody(int(*rj.Chunk), d)
		if err != nil {
			return Fault{}, pathErr("delay", err.Error())
		}
		return f, nil
	case "stalled_body":
		return StalledBody(), nil
	case "server_busy":
		return rj.sized(ServerBusy())
	default: // "reset"
		return ConnectionReset(), nil
	}
}

// sized applies an optional body_size.
func (rj *ruleJSON) sized(f Fault) (Fault, *LoadError) {
	if rj.BodySize == nil {
		return f, nil
	}
	g, err := f.withBodySize(int(*rj.BodySize)) // the kind is checked, the range here
	if err != nil {
		return f, pathErr("body_size", err.Error())
	}
	return g, nil
}

// retryAfterFields says which keys besides "form" each form takes.
var retryAfterFields = map[string][]string{
	formSeconds: {"seconds"}, string(IMFFixdate): {"seconds"}, string(RFC850): {"seconds"},
	string(Asctime): {"seconds"}, formOverlong: {"seconds"}, formRaw: {"values"},
	formDuplicate: {"values"}, formMissing: {}, formOversized: {"size"},
	formRemaining: {}, formRemainingMs: {},
}

func (rj *retryAfterJSON) retryAfter() (RetryAfter, *LoadError) {
	if rj.Form == nil {
		return RetryAfter{}, pathErr("retry_after.form", "required")
	}
	form := *rj.Form
	fields, ok := retryAfterFields[form]
	if !ok {
		return RetryAfter{}, pathErr("retry_after.form",
			fmt.Sprintf("unknown Retry-After form %q (want one of %s)", form, strings.Join(retryAfterForms, ", ")))
	}
	if k := extraField(fields, field{"seconds", rj.Seconds != nil}, field{"values", rj.Values != nil}, field{"size", rj.Size != nil}); k != "" {
		return RetryAfter{}, pathErr("retry_after."+k, fmt.Sprintf("not a field of the %s form", form))
	}
	switch form {
	case formSeconds, formOverlong:
		n := int64(60) // the overlong default
		switch {
		case rj.Seconds != nil:
			n = *rj.Seconds
		case form == formSeconds:
			return RetryAfter{}, pathErr("retry_after.seconds", "required")
		}
		if n < 0 {
			return RetryAfter{}, pathErr("retry_after.seconds", "must not be negative (use the raw form for \"-1\")")
		}
		if form == formSeconds {
			return RetryAfterSeconds(n), nil
		}
		return RetryAfter{form: formOverlong, seconds: n}, nil
	case string(IMFFixdate), string(RFC850), string(Asctime):
		if rj.Seconds == nil {
			return RetryAfter{}, pathErr("retry_after.seconds", "required")
		}
		if n := *rj.Seconds; n < -1e9 || n > 1e9 {
			return RetryAfter{}, pathErr("retry_after.seconds", "out of range [-1e9, 1e9]")
		}
		return RetryAfter{form: form, seconds: *rj.Seconds}, nil
	case formRaw, formDuplicate:
		values := rj.Values
		switch {
		case values == nil:
			return RetryAfter{}, pathErr("retry_after.values", "required")
		case form == formRaw && len(values) != 1:
			return RetryAfter{}, pathErr("retry_after.values", "the raw form takes exactly one value (use duplicate for more)")
		case form == formDuplicate && len(values) < 2:
			return RetryAfter{}, pathErr("retry_after.values", "the duplicate form takes two or more values")
		}
		if err := checkRawValues(values); err != nil {
			return RetryAfter{}, pathErr("retry_after.values", err.Error())
		}
		return RetryAfter{form: form, values: values}, nil
	case formOversized:
		n := int64(200)
		if rj.Size != nil {
			n = *rj.Size
		}
		if n < 1 || n > 64<<10 {
			return RetryAfter{}, pathErr("retry_after.size", "out of range [1, 65536]")
		}
		return RetryAfterOversized(int(n)), nil
	case formRemaining:
		return RetryAfterRemaining(), nil
	case formRemainingMs:
		return RetryAfterRemainingMs(), nil
	default: // missing
		return RetryAfterMissing(), nil
	}
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

// extraField is the first field present that allowed does not list, "" if
// none.
func extraField(allowed []string, fields ...field) string {
	for _, f := range fields {
		if f.present && !slices.Contains(allowed, f.name) {
			return f.name
		}
	}
	return ""
}
