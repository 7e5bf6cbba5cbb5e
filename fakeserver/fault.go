package fakeserver

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DateForm names one of the three HTTP-date forms of RFC 9110 section 5.6.7.
type DateForm string

// The HTTP-date forms a scripted Retry-After can take.
const (
	// IMFFixdate is the preferred form: "Sun, 06 Nov 1994 08:49:42 GMT".
	IMFFixdate DateForm = "imf-fixdate"
	// RFC850 is the obsolete RFC 850 form: "Sunday, 06-Nov-94 08:49:42 GMT".
	RFC850 DateForm = "rfc850"
	// Asctime is the obsolete ANSI C asctime() form: "Sun Nov  6 08:49:42 1994".
	Asctime DateForm = "asctime"
)

// dateLayouts are the Go layouts of the three forms. "GMT" is a literal in
// a Go layout (only "MST" is a zone token), so the times must be in UTC
// when formatted.
var dateLayouts = map[string]string{
	string(IMFFixdate): "Mon, 02 Jan 2006 15:04:05 GMT",
	string(RFC850):     "Monday, 02-Jan-06 15:04:05 GMT",
	string(Asctime):    "Mon Jan _2 15:04:05 2006",
}

// The Retry-After forms, as [RetryAfter.Form] reports them and as the JSON
// script names them.
const (
	formSeconds   = "seconds"
	formRaw       = "raw"
	formDuplicate = "duplicate"
	formMissing   = "missing"
	formOversized = "oversized"
	formOverlong  = "overlong"
	// The rule's own remaining time ([RetryAfterRemaining],
	// [RetryAfterRemainingMs]).
	formRemaining   = "remaining"
	formRemainingMs = "remaining-ms"
)

// retryAfterForms lists every form a script may name, for error messages.
var retryAfterForms = []string{formSeconds, string(IMFFixdate), string(RFC850), string(Asctime),
	formRaw, formDuplicate, formMissing, formOversized, formOverlong, formRemaining, formRemainingMs}

// maxFaultBodySize bounds a scripted error body (WithBodySize).
const maxFaultBodySize = 64 << 20

// RetryAfter is the Retry-After field of a scripted 429: the exact header
// values the server sends, possibly computed from the server's clock. Make
// one with the RetryAfter... functions; the zero value is a missing field.
type RetryAfter struct {
	form    string
	seconds int64    // seconds, overlong: the value; date forms: offset from now
	values  []string // raw, duplicate
	size    int      // oversized: length of the value in bytes
	// remaining forms: the wait the firing rule computed; set (and
	// resolved true) only in the fault a request was answered with.
	wait     time.Duration
	resolved bool
}

// RetryAfterSeconds is "Retry-After: n" (delay-seconds). n must not be
// negative; use [RetryAfterRaw] for "-1" and other malformed values.
func RetryAfterSeconds(n int64) RetryAfter {
	if n < 0 {
		panic("fakeserver: RetryAfterSeconds: negative delay; use RetryAfterRaw for malformed values")
	}
	return RetryAfter{form: formSeconds, seconds: n}
}

// RetryAfterDate is an HTTP-date Retry-After in the given form, equal to the
// server's clock plus d when the response is written, truncated to the whole
// second (HTTP-dates have no fraction). A negative d gives a date in the
// past. It panics on an unknown form.
func RetryAfterDate(form DateForm, d time.Duration) RetryAfter {
	if _, ok := dateLayouts[string(form)]; !ok {
		panic(fmt.Sprintf("fakeserver: RetryAfterDate: unknown date form %q", string(form)))
	}
	return RetryAfter{form: string(form), seconds: int64(d / time.Second)}
}

// RetryAfterRaw sends the given values exactly as they are, one header line
// each: one value is a malformed field when it is not valid ("1.5", "-1",
// "soon"), two or more are duplicate fields, none is a missing field. It
// panics on a value holding CR, LF or NUL (header injection is not a fault
// this server scripts).
func RetryAfterRaw(values ...string) RetryAfter {
	if err := checkRawValues(values); err != nil {
		panic("fakeserver: RetryAfterRaw: " + err.Error())
	}
	switch len(values) {
	case 0:
		return RetryAfter{form: formMissing}
	case 1:
		return RetryAfter{form: formRaw, values: append([]string(nil), values...)}
	default:
		return RetryAfter{form: formDuplicate, values: append([]string(nil), values...)}
	}
}

// RetryAfterMissing is a 429 without a Retry-After field.
func RetryAfterMissing() RetryAfter { return RetryAfter{form: formMissing} }

// RetryAfterOversized is a Retry-After value of exactly n bytes: n-1 zeros
// and a final "1". It is a valid delay-seconds of one second (leading zeros
// are allowed), so a client must reject it for its length alone. It panics
// when n < 1.
func RetryAfterOversized(n int) RetryAfter {
	if n < 1 || n > 64<<10 {
		panic("fakeserver: RetryAfterOversized: size out of range [1, 65536]")
	}
	return RetryAfter{form: formOversized, size: n}
}

// RetryAfterOverlong is a delay-seconds Retry-After of d (whole seconds),
// meant to be longer than the client's wait ceiling, such as 60 s. It sends
// the same bytes as [RetryAfterSeconds]; only the ledger's fault label
// differs. It panics on a negative d.
func RetryAfterOverlong(d time.Duration) RetryAfter {
	if d < 0 {
		panic("fakeserver: RetryAfterOverlong: negative delay")
	}
	return RetryAfter{form: formOverlong, seconds: int64(d / time.Second)}
}

// RetryAfterRemaining is the Retry-After of a rule by time or by rate
// ([Window], [TokenBucket]): the time until the window ends, or until the
// bucket's next token, in whole seconds rounded up ("Retry-After: 1" for a
// token 5 ms away). A rule with neither is refused (Script.Add panics,
// LoadScript fails).
func RetryAfterRemaining() RetryAfter { return RetryAfter{form: formRemaining} }

// RetryAfterRemainingMs is [RetryAfterRemaining] and, besides it, a
// "retry-after-ms" field with the same wait in whole milliseconds rounded
// up, as Azure OpenAI sends it: a token 5 ms away is "Retry-After: 1" and
// "retry-after-ms: 5".
func RetryAfterRemainingMs() RetryAfter { return RetryAfter{form: formRemainingMs} }

// remaining reports whether the form takes its value from the rule.
func (ra RetryAfter) remaining() bool {
	return ra.form == formRemaining || ra.form == formRemainingMs
}

// resolve returns ra with the rule's wait filled in (remaining forms only).
func (ra RetryAfter) resolve(wait time.Duration) RetryAfter {
	if ra.remaining() {
		ra.wait, ra.resolved = wait, true
	}
	return ra
}

// ceilDiv is d / unit rounded up, for d >= 0.
func ceilDiv(d, unit time.Duration) int64 { return int64((d + unit - 1) / unit) }

// millis is the retry-after-ms value of a resolved remaining-ms form.
func (ra RetryAfter) millis() (string, bool) {
	if ra.form != formRemainingMs || !ra.resolved {
		return "", false
	}
	return strconv.FormatInt(ceilDiv(ra.wait, time.Millisecond), 10), true
}

// Form reports the form: "seconds", "imf-fixdate", "rfc850", "asctime",
// "raw", "duplicate", "missing", "oversized", "overlong", "remaining" or
// "remaining-ms".
func (ra RetryAfter) Form() string {
	return cmp.Or(ra.form, formMissing)
}

// Values returns the exact Retry-After header values sent when the server's
// clock reads now; nil for a missing field. A remaining form's value comes
// from the rule that fires: Values gives it for the fault of a request
// answered (as the ledger's wait records it), nil for the form as scripted.
func (ra RetryAfter) Values(now time.Time) []string {
	switch ra.form {
	case formRemaining, formRemainingMs:
		if !ra.resolved {
			return nil
		}
		return []string{strconv.FormatInt(ceilDiv(ra.wait, time.Second), 10)}
	case formSeconds, formOverlong:
		return []string{strconv.FormatInt(ra.seconds, 10)}
	case string(IMFFixdate), string(RFC850), string(Asctime):
		return []string{now.UTC().Add(time.Duration(ra.seconds) * time.Second).Format(dateLayouts[ra.form])}
	case formRaw, formDuplicate:
		return append([]string(nil), ra.values...)
	case formOversized:
		return []string{strings.Repeat("0", ra.size-1) + "1"}
	default:
		return nil
	}
}

// String describes the field for the ledger and logs, without the raw
// values: "seconds(1)", "rfc850(+2s)", "duplicate(2)", "oversized(200B)",
// "remaining" as scripted and "remaining(2)" or "remaining-ms(1,5ms)" as
// answered.
func (ra RetryAfter) String() string {
	switch ra.form {
	case formSeconds, formOverlong:
		return fmt.Sprintf("%s(%d)", ra.form, ra.seconds)
	case string(IMFFixdate), string(RFC850), string(Asctime):
		return fmt.Sprintf("%s(%+ds)", ra.form, ra.seconds)
	case formRaw:
		return "raw"
	case formDuplicate:
		return fmt.Sprintf("duplicate(%d)", len(ra.values))
	case formOversized:
		return fmt.Sprintf("oversized(%dB)", ra.size)
	case formRemaining, formRemainingMs:
		if !ra.resolved {
			return ra.form
		}
		if ms, ok := ra.millis(); ok {
			return fmt.Sprintf("%s(%d,%sms)", ra.form, ceilDiv(ra.wait, time.Second), ms)
		}
		return fmt.Sprintf("%s(%d)", ra.form, ceilDiv(ra.wait, time.Second))
	default:
		return formMissing
	}
}

func checkRawValues(values []string) error {
	for i, v := range values {
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("value %d holds CR, LF or NUL", i)
		}
	}
	return nil
}

// faultKind is what a [Fault] does.
type faultKind uint8

const (
	kindNone faultKind = iota
	kindThrottle
	kindStatus
	kindRedirect
	kindSlowBody
	kindStalledBody
	kindReset
	kindServerBusy
)

// faultNames are the kinds as the JSON script and [Fault.Kind] name them.
var faultNames = map[faultKind]string{
	kindThrottle:    "throttle",
	kindStatus:      "status",
	kindRedirect:    "redirect",
	kindSlowBody:    "slow_body",
	kindStalledBody: "stalled_body",
	kindReset:       "reset",
	kindServerBusy:  "server_busy",
}

// Fault is what the server does when a rule fires; the zero Fault is none.
// [Throttle], [Status], [ServerBusy], [Redirect] and [ConnectionReset]
// replace the answer: the request reaches neither the in-memory service
// nor a proxy's upstream. [SlowBody] and [StalledBody] deliver the normal
// answer with a scripted body.
type Fault struct {
	kind       faultKind
	status     int
	retryAfter RetryAfter
	location   string
	bodySize   int // -1: the surface's normal error body
	chunk      int
	delay      time.Duration
	openai     bool  // WithRetryAfterMs: Azure OpenAI's 429 (openai.go's openaiHeaders),
	openaiMs   int64 // its retry-after-ms (0: none)
	tokens     bool  // and x-ratelimit-remaining-tokens at 0 (else -requests)
}

// Throttle answers 429 Too Many Requests with the Retry-After field ra and
// the surface's error body (JSON for Search and File, XML for Blob). A
// File upload throttle is the queue-429 of the read-recovery policy; with
// [Always] it is a persistent 429.
func Throttle(ra RetryAfter) Fault {
	return Fault{kind: kindThrottle, status: http.StatusTooManyRequests, retryAfter: ra, bodySize: -1}
}

// WithRetryAfterMs returns the throttle f as Azure OpenAI sends it, on any
// route ([MatchPath]("/v1/chat/completions") throttles an inference call):
// "retry-after-ms: ms" beside its Retry-After (none for 0), the OpenAI
// surface's rate-limit headers, and the limit it names at 0:
// x-ratelimit-remaining-tokens with tokens, else -requests. The ledger's
// Fault shows the Retry-After part. It panics on another fault or ms < 0.
func (f Fault) WithRetryAfterMs(ms int64, tokens bool) Fault {
	if f.kind != kindThrottle || ms < 0 {
		panic("fakeserver: WithRetryAfterMs: a throttle and ms >= 0 only")
	}
	f.openai, f.openaiMs, f.tokens = true, ms, tokens
	return f
}

// Status answers code (400 to 599, not 429: use [Throttle]) with the
// surface's error body, such as 500 or 503. It panics on another code.
func Status(code int) Fault { return must("Status")(newStatus(code)) }

// must(name)(f, err) returns f, or panics with err: the Go constructors
// panic where a JSON script gets an error.
func must(name string) func(Fault, error) Fault {
	return func(f Fault, err error) Fault {
		if err != nil {
			panic("fakeserver: " + name + ": " + err.Error())
		}
		return f
	}
}

func newStatus(code int) (Fault, error) {
	if code < 400 || code > 599 || code == http.StatusTooManyRequests {
		return Fault{}, fmt.Errorf("status %d: want 400 to 599, not 429 (use a throttle)", code)
	}
	return Fault{kind: kindStatus, status: code, bodySize: -1}, nil
}

// ServerBusy answers 503 Service Unavailable as Azure Storage does when an
// account or partition is over its scalability targets: the XML error body
//
//	<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>Operations per second is over the account limit.
//	RequestId:{x-ms-request-id}
//	Time:{server clock, 2006-01-02T15:04:05.0000000Z}</Message></Error>
//
// on every route, with "x-ms-error-code: ServerBusy" and no Retry-After
// (Storage leaves the back-off to the client). With [Window] or
// [TokenBucket] it throttles as Storage does.
func ServerBusy() Fault {
	return Fault{kind: kindServerBusy, status: http.StatusServiceUnavailable, bodySize: -1}
}

// serverBusyResponse is the answer of a [ServerBusy] fault, its body as
// the ServerBusy doc shows it.
func serverBusyResponse(requestID string, now time.Time) *response {
	resp := newResponse(http.StatusServiceUnavailable)
	resp.header.Set("Content-Type", "application/xml")
	resp.header.Set("x-ms-error-code", "ServerBusy")
	resp.body = []byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>` +
		"Operations per second is over the account limit.\nRequestId:" + requestID +
		"\nTime:" + now.UTC().Format("2006-01-02T15:04:05.0000000Z") + `</Message></Error>`)
	return resp
}

// Redirect answers code (301, 302, 303, 307 or 308) with "Location:
// location" and a short body. It panics on another code or an empty
// location.
func Redirect(code int, location string) Fault {
	return must("Redirect")(newRedirect(code, location))
}

func newRedirect(code int, location string) (Fault, error) {
	switch code {
	case 301, 302, 303, 307, 308:
	default:
		return Fault{}, fmt.Errorf("status %d: want 301, 302, 303, 307 or 308", code)
	}
	if location == "" || strings.ContainsAny(location, "\r\n\x00") {
		return Fault{}, errors.New("location must be a non-empty URL without CR, LF or NUL")
	}
	return Fault{kind: kindRedirect, status: code, location: location}, nil
}

// SlowBody delivers the normal answer with its headers at once, then the
// body chunk bytes at a time, waiting delay before each chunk: a body of n
// bytes takes ceil(n/chunk)*delay. The wait honours the client going away
// and the server closing. It panics when chunk < 1 or delay < 0.
func SlowBody(chunk int, delay time.Duration) Fault {
	return must("SlowBody")(newSlowBody(chunk, delay))
}

func newSlowBody(chunk int, delay time.Duration) (Fault, error) {
	if chunk < 1 {
		return Fault{}, errors.New("chunk must be at least 1 byte")
	}
	if delay < 0 {
		return Fault{}, errors.New("delay must not be negative")
	}
	return Fault{kind: kindSlowBody, chunk: chunk, delay: delay}, nil
}

// StalledBody sends the normal answer's status and headers (with its
// Content-Length), then no body byte at all until the client goes away or
// the server closes.
func StalledBody() Fault { return Fault{kind: kindStalledBody} }

// ConnectionReset answers nothing: over a listener the connection is
// hijacked and closed with SO_LINGER 0, so the client sees a TCP RST; through
// [Server.Transport] the round trip fails with an error for which
// errors.Is(err, syscall.ECONNRESET) holds.
func ConnectionReset() Fault { return Fault{kind: kindReset} }

// WithBodySize returns f with an error body of exactly n bytes: the
// surface's error document followed by spaces (or cut to n bytes when it is
// longer), such as an 8 MiB 429 body that a client must close unread. It
// applies to [Throttle], [Status] and [ServerBusy] faults and panics on
// another fault or n outside [0, 64 MiB].
func (f Fault) WithBodySize(n int) Fault { return must("WithBodySize")(f.withBodySize(n)) }

func (f Fault) withBodySize(n int) (Fault, error) {
	if f.kind != kindThrottle && f.kind != kindStatus && f.kind != kindServerBusy {
		return f, errors.New("a body size applies to throttle, status and server_busy faults only")
	}
	if n < 0 || n > maxFaultBodySize {
		return f, fmt.Errorf("body size %d out of range [0, %d]", n, maxFaultBodySize)
	}
	f.bodySize = n
	return f, nil
}

// Kind names the fault: "throttle", "status", "server_busy", "redirect",
// "slow_body", "stalled_body", "reset", or "" for the zero Fault.
func (f Fault) Kind() string { return faultNames[f.kind] }

// StatusCode is the status the fault answers, or 0 when the fault keeps the
// normal answer's status (slow and stalled bodies) or answers nothing
// (reset).
func (f Fault) StatusCode() int { return f.status }

// RetryAfter is the scripted Retry-After of a throttle (zero otherwise).
func (f Fault) RetryAfter() RetryAfter { return f.retryAfter }

// String describes the fault for the ledger and logs, without raw header
// values: "429 retry-after=rfc850(+2s)", "503", "503 ServerBusy",
// "redirect 307", "slow_body(1B/100ms)", "stalled_body", "reset".
func (f Fault) String() string {
	var s string
	switch f.kind {
	case kindThrottle:
		s = "429 retry-after=" + f.retryAfter.String()
	case kindStatus:
		s = strconv.Itoa(f.status)
	case kindServerBusy:
		s = "503 ServerBusy"
	case kindRedirect:
		return "redirect " + strconv.Itoa(f.status)
	case kindSlowBody:
		return fmt.Sprintf("slow_body(%dB/%s)", f.chunk, f.delay)
	default: // "" for none
		return f.Kind()
	}
	if f.bodySize >= 0 {
		s += fmt.Sprintf(" body=%dB", f.bodySize)
	}
	return s
}

// replaces reports whether the fault answers instead of the service.
func (f Fault) replaces() bool {
	switch f.kind {
	case kindThrottle, kindStatus, kindServerBusy, kindRedirect, kindReset:
		return true
	}
	return false
}

// resolve returns f with a remaining Retry-After filled in from the firing
// rule's wait.
func (f Fault) resolve(wait time.Duration) Fault {
	f.retryAfter = f.retryAfter.resolve(wait)
	return f
}
