package fakeserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxScriptSize bounds a script file.
const maxScriptSize = 1 << 20

// maxScriptRules bounds the rules of one script file.
const maxScriptRules = 10000

// ScriptError is what [LoadScript] returns for a bad script: where it is
// wrong and why.
type ScriptError struct {
	// Rule is the 0-based index of the rule in "rules", -1 when the error is
	// not about one rule (invalid JSON, an unknown top-level key).
	Rule int
	// Field is the rule's field at fault, such as "route" or
	// "retry_after.form"; "" for the rule as a whole.
	Field string
	// Line and Column are 1-based: the position of a syntax error, or the
	// start of the rule at fault (Column then 0). 0 when unknown.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString("script: ")
	if e.Rule >= 0 {
		fmt.Fprintf(&b, "rules[%d]", e.Rule)
		if e.Field != "" {
			b.WriteString("." + e.Field)
		}
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	} else {
		if e.Field != "" {
			b.WriteString(e.Field + " ")
		}
		switch {
		case e.Line > 0 && e.Column > 0:
			fmt.Fprintf(&b, "line %d, column %d", e.Line, e.Column)
		case e.Line > 0:
			fmt.Fprintf(&b, "line %d", e.Line)
		}
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// LoadScriptFile reads a JSON script file (see [LoadScript]). Errors name
// the file; a *ScriptError inside is found with errors.As.
func LoadScriptFile(path string) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := LoadScript(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// LoadScript reads a JSON script (the format is in the package
// documentation). A bad script returns a *ScriptError naming the rule index
// and field, or the line and column of a syntax error. Unknown fields are
// errors, so that a typo does not silently script nothing.
func LoadScript(r io.Reader) (*Script, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxScriptSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxScriptSize {
		return nil, &ScriptError{Rule: -1, Msg: fmt.Sprintf("script larger than %d bytes", maxScriptSize)}
	}
	if !json.Valid(data) {
		return nil, syntaxError(data)
	}
	raws, err := splitRules(data)
	if err != nil {
		return nil, err
	}
	s := &Script{}
	for i, raw := range raws {
		rule, err := decodeRule(raw.data)
		if err != nil {
			err.Rule = i
			err.Line = raw.line
			return nil, err
		}
		if field, verr := rule.validate(); verr != nil {
			return nil, &ScriptError{Rule: i, Field: field, Line: raw.line, Msg: verr.Error()}
		}
		s.rules = append(s.rules, &ruleState{Rule: rule})
	}
	return s, nil
}

// syntaxError locates what makes data invalid JSON.
func syntaxError(data []byte) *ScriptError {
	at := func(off int, msg string) *ScriptError {
		line, col := position(data, off)
		return &ScriptError{Rule: -1, Line: line, Column: col, Msg: "invalid JSON: " + msg}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		// One valid value, then something else.
		return at(skipSpace(data, int(dec.InputOffset())), "data after the script object")
	}
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return at(len(data), "unexpected end of JSON input")
	case errors.As(err, &se):
		// Offset counts the offending byte.
		return at(int(se.Offset)-1, se.Error())
	default:
		return at(0, err.Error())
	}
}

type rawRule struct {
	data json.RawMessage
	line int
}

// splitRules walks the top-level object (already valid JSON) and returns
// the elements of "rules" with the line each starts on.
func splitRules(data []byte) ([]rawRule, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	at := func() int { line, _ := position(data, skipSpace(data, int(dec.InputOffset()))); return line }
	tok, _ := dec.Token()
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &ScriptError{Rule: -1, Line: 1, Msg: `a script is a JSON object: {"rules": [...]}`}
	}
	var rules []rawRule
	seen := false
	for dec.More() {
		line := at()
		tok, _ := dec.Token()
		key, _ := tok.(string)
		switch key {
		case "comment":
			var c string
			if err := dec.Decode(&c); err != nil {
				return nil, &ScriptError{Rule: -1, Field: "comment", Line: line, Msg: "want a string"}
			}
		case "rules":
			seen = true
			tok, _ := dec.Token()
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return nil, &ScriptError{Rule: -1, Field: "rules", Line: line, Msg: "want an array of rules"}
			}
			for dec.More() {
				line := at()
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil { // unreachable: data is valid
					return nil, &ScriptError{Rule: len(rules), Line: line, Msg: err.Error()}
				}
				if len(rules) == maxScriptRules {
					return nil, &ScriptError{Rule: len(rules), Line: line, Msg: fmt.Sprintf("more than %d rules", maxScriptRules)}
				}
				rules = append(rules, rawRule{data: raw, line: line})
			}
			_, _ = dec.Token() // ']'
		default:
			return nil, &ScriptError{Rule: -1, Field: strconv.Quote(key), Line: line, Msg: `unknown top-level key (want "rules" or "comment")`}
		}
	}
	if !seen {
		return nil, &ScriptError{Rule: -1, Line: 1, Msg: `missing "rules"`}
	}
	return rules, nil
}

// skipSpace returns the offset of the first byte at or after off that is
// neither JSON white space nor a separator.
func skipSpace(data []byte, off int) int {
	for off < len(data) {
		switch data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

// position converts a byte offset into a 1-based line and column.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = 1 + off - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}

// ruleFields are the keys a rule object may hold.
var ruleFields = []string{"comment", "route", "method", "path_prefix", "nth", "times", "always",
	"window", "token_bucket", "fault", "status", "location", "retry_after", "body_size", "chunk", "delay"}

var windowFields = []string{"start", "duration"}

var bucketFields = []string{"rate", "burst", "key"}

var retryAfterFields = []string{"form", "seconds", "values", "size"}

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

var faultKeys = []string{"status", "location", "retry_after", "body_size", "chunk", "delay"}

// object is one JSON object being decoded field by field.
type object map[string]json.RawMessage

func decodeRule(data []byte) (Rule, *ScriptError) {
	var r Rule
	obj, err := decodeObject(data, "", ruleFields)
	if err != nil {
		return r, err
	}
	if r.Route, err = obj.str("route", true); err != nil {
		return r, err
	}
	if r.Method, err = obj.str("method", false); err != nil {
		return r, err
	}
	r.Method = strings.ToUpper(r.Method)
	if r.PathPrefix, err = obj.str("path_prefix", false); err != nil {
		return r, err
	}
	if r.Nth, err = obj.positive("nth"); err != nil {
		return r, err
	}
	if r.Times, err = obj.positive("times"); err != nil {
		return r, err
	}
	if raw, ok := obj["always"]; ok {
		if err := json.Unmarshal(raw, &r.Always); err != nil {
			return r, fieldErr("always", "want true or false")
		}
	}
	if raw, ok := obj["window"]; ok {
		if r.Window, err = decodeWindow(raw); err != nil {
			return r, err
		}
	}
	if raw, ok := obj["token_bucket"]; ok {
		if r.Bucket, err = decodeBucket(raw); err != nil {
			return r, err
		}
	}
	kind, err := obj.str("fault", true)
	if err != nil {
		return r, err
	}
	allowed, ok := faultFields[kind]
	if !ok {
		return r, fieldErr("fault", fmt.Sprintf("unknown fault %q (want one of %s)", kind, strings.Join(sortedKeys(faultFields), ", ")))
	}
	for _, k := range faultKeys {
		if _, present := obj[k]; present && !slices.Contains(allowed, k) {
			return r, fieldErr(k, fmt.Sprintf("not a field of a %s fault", kind))
		}
	}
	if r.Fault, err = obj.fault(kind); err != nil {
		return r, err
	}
	return r, nil
}

func (obj object) fault(kind string) (Fault, *ScriptError) {
	switch kind {
	case "throttle":
		raw, ok := obj["retry_after"]
		if !ok {
			return Fault{}, fieldErr("retry_after", `a throttle needs a retry_after (use {"form": "missing"} for none)`)
		}
		ra, err := decodeRetryAfter(raw)
		if err != nil {
			return Fault{}, err
		}
		return obj.sized(Throttle(ra))
	case "status":
		code, err := obj.integer("status", true)
		if err != nil {
			return Fault{}, err
		}
		f, ferr := newStatus(int(code))
		if ferr != nil {
			return Fault{}, fieldErr("status", ferr.Error())
		}
		return obj.sized(f)
	case "redirect":
		code, err := obj.integer("status", true)
		if err != nil {
			return Fault{}, err
		}
		loc, err := obj.str("location", true)
		if err != nil {
			return Fault{}, err
		}
		f, ferr := newRedirect(int(code), loc)
		if ferr != nil {
			field := "status"
			if code >= 300 && code < 400 {
				field = "location"
			}
			return Fault{}, fieldErr(field, ferr.Error())
		}
		return f, nil
	case "slow_body":
		chunk, err := obj.integer("chunk", true)
		if err != nil {
			return Fault{}, err
		}
		ds, err := obj.str("delay", true)
		if err != nil {
			return Fault{}, err
		}
		d, perr := time.ParseDuration(ds)
		if perr != nil {
			return Fault{}, fieldErr("delay", fmt.Sprintf("want a Go duration such as \"100ms\", got %q", ds))
		}
		if chunk < 1 || chunk > maxFaultBodySize {
			return Fault{}, fieldErr("chunk", fmt.Sprintf("chunk %d out of range [1, %d]", chunk, maxFaultBodySize))
		}
		f, ferr := newSlowBody(int(chunk), d)
		if ferr != nil {
			return Fault{}, fieldErr("delay", ferr.Error())
		}
		return f, nil
	case "stalled_body":
		return StalledBody(), nil
	case "server_busy":
		return obj.sized(ServerBusy())
	default: // "reset"
		return ConnectionReset(), nil
	}
}

// sized applies an optional body_size.
func (obj object) sized(f Fault) (Fault, *ScriptError) {
	if _, ok := obj["body_size"]; !ok {
		return f, nil
	}
	n, err := obj.integer("body_size", true)
	if err != nil {
		return f, err
	}
	if n < 0 || n > maxFaultBodySize {
		return f, fieldErr("body_size", fmt.Sprintf("body size %d out of range [0, %d]", n, maxFaultBodySize))
	}
	g, ferr := f.withBodySize(int(n))
	if ferr != nil { // unreachable: the kind and range are checked
		return f, fieldErr("body_size", ferr.Error())
	}
	return g, nil
}

func decodeRetryAfter(data []byte) (RetryAfter, *ScriptError) {
	obj, err := decodeObject(data, "retry_after.", retryAfterFields)
	if err != nil {
		return RetryAfter{}, err
	}
	form, err := obj.str("form", true)
	if err != nil {
		return RetryAfter{}, prefixed(err, "retry_after.")
	}
	want := map[string][]string{
		formSeconds: {"seconds"}, string(IMFFixdate): {"seconds"}, string(RFC850): {"seconds"},
		string(Asctime): {"seconds"}, formOverlong: {"seconds"}, formRaw: {"values"},
		formDuplicate: {"values"}, formMissing: {}, formOversized: {"size"},
		formRemaining: {}, formRemainingMs: {},
	}
	fields, ok := want[form]
	if !ok {
		return RetryAfter{}, fieldErr("retry_after.form",
			fmt.Sprintf("unknown Retry-After form %q (want one of %s)", form, strings.Join(retryAfterForms, ", ")))
	}
	for _, k := range retryAfterFields[1:] {
		if _, present := obj[k]; present && !slices.Contains(fields, k) {
			return RetryAfter{}, fieldErr("retry_after."+k, fmt.Sprintf("not a field of the %s form", form))
		}
	}
	switch form {
	case formSeconds, formOverlong:
		required := form == formSeconds
		n, err := obj.integer("seconds", required)
		if err != nil {
			return RetryAfter{}, prefixed(err, "retry_after.")
		}
		if _, present := obj["seconds"]; !present {
			n = 60 // overlong default
		}
		if n < 0 {
			return RetryAfter{}, fieldErr("retry_after.seconds", "must not be negative (use the raw form for \"-1\")")
		}
		if form == formSeconds {
			return RetryAfterSeconds(n), nil
		}
		return RetryAfter{form: formOverlong, seconds: n}, nil
	case string(IMFFixdate), string(RFC850), string(Asctime):
		n, err := obj.integer("seconds", true)
		if err != nil {
			return RetryAfter{}, prefixed(err, "retry_after.")
		}
		if n < -1e9 || n > 1e9 {
			return RetryAfter{}, fieldErr("retry_after.seconds", "out of range [-1e9, 1e9]")
		}
		return RetryAfter{form: form, seconds: n}, nil
	case formRaw, formDuplicate:
		var values []string
		raw, present := obj["values"]
		if !present {
			return RetryAfter{}, fieldErr("retry_after.values", "required")
		}
		if err := json.Unmarshal(raw, &values); err != nil {
			return RetryAfter{}, fieldErr("retry_after.values", "want an array of strings")
		}
		if form == formRaw && len(values) != 1 {
			return RetryAfter{}, fieldErr("retry_after.values", "the raw form takes exactly one value (use duplicate for more)")
		}
		if form == formDuplicate && len(values) < 2 {
			return RetryAfter{}, fieldErr("retry_after.values", "the duplicate form takes two or more values")
		}
		if err := checkRawValues(values); err != nil {
			return RetryAfter{}, fieldErr("retry_after.values", err.Error())
		}
		return RetryAfter{form: form, values: values}, nil
	case formOversized:
		n, err := obj.integer("size", false)
		if err != nil {
			return RetryAfter{}, prefixed(err, "retry_after.")
		}
		if _, present := obj["size"]; !present {
			n = 200
		}
		if n < 1 || n > 64<<10 {
			return RetryAfter{}, fieldErr("retry_after.size", "out of range [1, 65536]")
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

// decodeWindow reads {"start": RFC 3339 time (optional), "duration": Go
// duration}.
func decodeWindow(data []byte) (TimeWindow, *ScriptError) {
	var w TimeWindow
	obj, err := decodeObject(data, "window.", windowFields)
	if err != nil {
		return w, err
	}
	start, err := obj.str("start", false)
	if err != nil {
		return w, prefixed(err, "window.")
	}
	if start != "" {
		t, perr := time.Parse(time.RFC3339Nano, start)
		if perr != nil {
			return w, fieldErr("window.start", fmt.Sprintf("want an RFC 3339 time such as \"2026-12-01T10:00:00Z\", got %q", start))
		}
		w.Start = t
	}
	ds, err := obj.str("duration", true)
	if err != nil {
		return w, prefixed(err, "window.")
	}
	d, perr := time.ParseDuration(ds)
	if perr != nil {
		return w, fieldErr("window.duration", fmt.Sprintf("want a Go duration such as \"2s\", got %q", ds))
	}
	if d <= 0 {
		return w, fieldErr("window.duration", "the duration must be above 0")
	}
	w.Duration = d
	return w, nil
}

// decodeBucket reads {"rate": tokens per second, "burst": N, "key":
// "account" or "host" (optional)}.
func decodeBucket(data []byte) (Bucket, *ScriptError) {
	var b Bucket
	obj, err := decodeObject(data, "token_bucket.", bucketFields)
	if err != nil {
		return b, err
	}
	raw, ok := obj["rate"]
	if !ok {
		return b, fieldErr("token_bucket.rate", "required")
	}
	if err := json.Unmarshal(raw, &b.Rate); err != nil {
		return b, fieldErr("token_bucket.rate", "want a number")
	}
	burst, err := obj.integer("burst", true)
	if err != nil {
		return b, prefixed(err, "token_bucket.")
	}
	if burst < 1 || burst > maxBucketBurst {
		return b, fieldErr("token_bucket.burst", fmt.Sprintf("burst %d out of range [1, %d]", burst, maxBucketBurst))
	}
	b.Burst = int(burst)
	key, err := obj.str("key", false)
	if err != nil {
		return b, prefixed(err, "token_bucket.")
	}
	b.Key = BucketKey(key)
	return b, nil // the rate's range and the key are checked by validate
}

func decodeObject(data []byte, prefix string, allowed []string) (object, *ScriptError) {
	var obj object
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		field := strings.TrimSuffix(prefix, ".")
		return nil, fieldErr(field, "want a JSON object")
	}
	for _, k := range sortedKeys(obj) {
		if !slices.Contains(allowed, k) {
			return nil, fieldErr(prefix+k, "unknown field")
		}
	}
	return obj, nil
}

func (obj object) str(key string, required bool) (string, *ScriptError) {
	raw, ok := obj[key]
	if !ok {
		if required {
			return "", fieldErr(key, "required")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fieldErr(key, "want a string")
	}
	return s, nil
}

func (obj object) integer(key string, required bool) (int64, *ScriptError) {
	raw, ok := obj[key]
	if !ok {
		if required {
			return 0, fieldErr(key, "required")
		}
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fieldErr(key, "want an integer")
	}
	return n, nil
}

func (obj object) positive(key string) (int, *ScriptError) {
	n, err := obj.integer(key, false)
	if err != nil {
		return 0, err
	}
	if _, ok := obj[key]; ok && n < 1 {
		return 0, fieldErr(key, "must be at least 1")
	}
	if n > 1<<30 {
		return 0, fieldErr(key, fmt.Sprintf("%d out of range [1, %d]", n, 1<<30))
	}
	return int(n), nil
}

func fieldErr(field, msg string) *ScriptError { return &ScriptError{Field: field, Msg: msg} }

func prefixed(e *ScriptError, prefix string) *ScriptError {
	e.Field = prefix + e.Field
	return e
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
