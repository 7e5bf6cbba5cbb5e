package readrecovery

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/readrecovery/readrecovery/internal/httpdate"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// RetryAfterKind says what a response's Retry-After field was, after the
// strict parse of [ParseRetryAfter].
type RetryAfterKind string

// The six kinds of Retry-After observation.
const (
	// RetryAfterSeconds is a valid delay-seconds value of at most 30 s.
	RetryAfterSeconds RetryAfterKind = "seconds"
	// RetryAfterDate is a valid HTTP-date (IMF-fixdate, RFC 850 or asctime)
	// at most 30 s after the receipt time; a past date is a zero delay.
	RetryAfterDate RetryAfterKind = "date"
	// RetryAfterMissing means the response had no Retry-After field.
	RetryAfterMissing RetryAfterKind = "missing"
	// RetryAfterInvalid means the field was malformed or duplicated.
	RetryAfterInvalid RetryAfterKind = "invalid"
	// RetryAfterOverlong is a valid delay above the 30 s ceiling.
	RetryAfterOverlong RetryAfterKind = "overlong"
	// RetryAfterOversized is a field longer than [MaxRetryAfterBytes].
	RetryAfterOversized RetryAfterKind = "oversized"
)

// MaxRetryAfterBytes bounds the length of one Retry-After field value. A
// longer value is [RetryAfterOversized]: it fails closed, with no wait.
const MaxRetryAfterBytes = 128

// MaxServerWait is the longest server-directed wait the transport takes. A
// valid delay above it is [RetryAfterOverlong] and stops the sequence; it is
// never shortened.
const MaxServerWait = 30 * time.Second

// fallbackDelaySeconds is the diagnosed delay used for a missing, malformed
// or duplicated field. It lives in the timing only, never in the typed value.
const fallbackDelaySeconds = 1

// RetryAfter is the canonical, typed Retry-After observation. Value is the
// delay in seconds for [RetryAfterSeconds] and [RetryAfterDate] and 0 for every
// other kind (0 is the overlong sentinel, not a zero wait).
type RetryAfter struct {
	Kind  RetryAfterKind `json:"kind"`
	Value int64          `json:"value"`
}

// RetryAfterTiming is the portable, sanitized timing of a Retry-After
// observation, in UTC Unix seconds: NotBeforeUTC = ReceivedAtUTC +
// ServerDelaySeconds. It exists only when the receipt time is known and the
// delay is representable.
type RetryAfterTiming struct {
	ReceivedAtUTC      int64 `json:"received_at_utc"`
	NotBeforeUTC       int64 `json:"not_before_utc"`
	ServerDelaySeconds int64 `json:"server_delay_seconds"`
}

// ParseRetryAfter reads the Retry-After field of a response received at
// receivedAt and returns its typed value, its UTC timing and a short
// diagnostic: "" for a clean field ([RetryAfterSeconds], [RetryAfterDate]),
// otherwise what was wrong, never the field's value.
//
// The key matches in any ASCII case. Two values or two keys are a duplicate
// ([RetryAfterInvalid]); a value longer than [MaxRetryAfterBytes] is
// [RetryAfterOversized], with no timing, and wins over a duplicate. The
// value, trimmed of SP and HTAB, is delay-seconds (1*DIGIT) or an HTTP-date
// in one of RFC 9110's three forms, resolved against receivedAt in UTC; a
// past date is a zero delay. A delay above [MaxServerWait] is
// [RetryAfterOverlong]. Every kind but seconds and date has Value 0; a
// missing or malformed field's 1 s fallback lives in its timing only. A zero
// receivedAt gives no timing, and leaves an HTTP-date unresolved
// ([RetryAfterInvalid]).
//
// docs/policy.md ("Retry-After in detail") states each rule exactly.
// ParseRetryAfter never panics and allocates at most the returned timing,
// except for the diagnostics of duplicate and overlong fields, which spell
// out a count or a delay.
func ParseRetryAfter(h http.Header, receivedAt time.Time) (RetryAfter, *RetryAfterTiming, string) {
	var timing RetryAfterTiming
	p := raParser{timing: &timing}
	ra, hasTiming, diag := p.parse(h, receivedAt)
	if p.spell != raSpellNone {
		diag = p.spelledDiag(hasTiming)
	}
	if !hasTiming {
		return ra, nil, diag
	}
	t := timing
	return ra, &t, diag
}

// parseRetryAfterAt is [ParseRetryAfter] for the transport: it fills
// *timing (which must not be nil) when hasTiming is true, allocates nothing,
// and returns only constant diagnostics. Those of a duplicate or overlong
// field do not spell out the count or the delay (the delay is in the
// timing); every other result is the one ParseRetryAfter returns.
func parseRetryAfterAt(h http.Header, receivedAt time.Time, timing *RetryAfterTiming) (ra RetryAfter, hasTiming bool, diag string) {
	p := raParser{timing: timing}
	return p.parse(h, receivedAt)
}

// waitFields is what the transport reads from a 429's header: Retry-After
// as parseRetryAfterAt reads it and Azure's millisecond floor as
// parseRetryAfterMs reads it.
type waitFields struct {
	ra        RetryAfter
	hasTiming bool // *timing was filled
	diag      string
	ms        int64
	msKind    RetryAfterKind
	msDiag    string
}

// parseWaitFieldsAt reads the three fields of a 429 with one pass over the
// header's keys; it allocates nothing and fills *timing as
// parseRetryAfterAt does.
func parseWaitFieldsAt(h http.Header, receivedAt time.Time, timing *RetryAfterTiming) (w waitFields) {
	var f raFields
	f.lookup(h)
	p := raParser{timing: timing}
	w.ra, w.hasTiming, w.diag = p.parseField(&f.ra, receivedAt)
	w.ms, w.msKind, w.msDiag = judgeRetryAfterMs(&f.ms)
	return w
}

// The canonical key of the field and the diagnostics. They are constants,
// so that no outcome needs an allocation; none carries the field's value.
const (
	raKey = "Retry-After"

	raDiagFallback   = "; 1 s fallback"
	raDiagNoReceipt  = "; unresolved, no receipt time"
	raDiagTooLate    = "; receipt time too late to represent"
	raDiagMissing    = "retry-after: missing"
	raDiagEmpty      = "retry-after: empty value"
	raDiagNeither    = "retry-after: neither delay-seconds nor http-date"
	raDiagNotDigits  = "retry-after: delay-seconds is not 1*DIGIT"
	raDiagDupKeys    = "retry-after: several keys differing in case"
	raDiagDupValues  = "retry-after: several values"
	raDiagPrefix     = "retry-after: "
	raDiagNoTiming   = "retry-after: http-date without receipt time; unresolved"
	raDiagUnrepr     = "retry-after: delay not representable in unix seconds; unresolved"
	raDiagYearUnres  = "retry-after: rfc850 year not resolvable against receipt time; unresolved"
	raDiagOverlongPf = "retry-after: delay "
)

// The diagnostics that name a bound, formatted from its constant once, at
// package initialization.
var (
	raBoundText      = strconv.Itoa(MaxRetryAfterBytes) + " bytes"
	raCeilingText    = strconv.FormatInt(raMaxWaitSeconds, 10) + " s ceiling"
	raDiagOversized  = "retry-after: value longer than " + raBoundText + "; fail closed, no wait"
	raDiagOverlong   = "retry-after: delay above " + raCeilingText + "; sequence stops"
	raDiagOverlongSf = " s above " + raCeilingText + "; sequence stops"
)

// raMaxWaitSeconds is [MaxServerWait] in whole seconds.
const raMaxWaitSeconds = int64(MaxServerWait / time.Second)

// raReason is why a field gets the 1 s fallback; it indexes raFallbackDiags.
type raReason uint8

const (
	raReasonMissing raReason = iota
	raReasonEmpty
	raReasonNeither
	raReasonNotDigits
	raReasonDupKeys
	raReasonDupValues
	raReasonDateLayout
	raReasonDateDayName
	raReasonDateMonth
	raReasonDateDigits
	raReasonDateRange
	raReasonDateClock
	raReasonDateZone
	raReasonDateWeekday
	raReasonCount
)

// raFallbackDiag is the diagnostic of one reason in its three settings: the
// fallback timing exists, the receipt time is unknown, or receipt+1 s
// overflows.
type raFallbackDiag struct{ fallback, noReceipt, tooLate string }

var raFallbackDiags = [raReasonCount]raFallbackDiag{
	raReasonMissing:     raDiags(raDiagMissing),
	raReasonEmpty:       raDiags(raDiagEmpty),
	raReasonNeither:     raDiags(raDiagNeither),
	raReasonNotDigits:   raDiags(raDiagNotDigits),
	raReasonDupKeys:     raDiags(raDiagDupKeys),
	raReasonDupValues:   raDiags(raDiagDupValues),
	raReasonDateLayout:  raDiags(raDiagPrefix + string(httpdate.ErrLayout)),
	raReasonDateDayName: raDiags(raDiagPrefix + string(httpdate.ErrDayName)),
	raReasonDateMonth:   raDiags(raDiagPrefix + string(httpdate.ErrMonth)),
	raReasonDateDigits:  raDiags(raDiagPrefix + string(httpdate.ErrDigits)),
	raReasonDateRange:   raDiags(raDiagPrefix + string(httpdate.ErrDayRange)),
	raReasonDateClock:   raDiags(raDiagPrefix + string(httpdate.ErrClock)),
	raReasonDateZone:    raDiags(raDiagPrefix + string(httpdate.ErrZone)),
	raReasonDateWeekday: raDiags(raDiagPrefix + string(httpdate.ErrWeekday)),
}

// raDiags builds the three diagnostics of a reason, once, at package
// initialization.
func raDiags(reason string) raFallbackDiag {
	return raFallbackDiag{reason + raDiagFallback, reason + raDiagNoReceipt, reason + raDiagFallback + raDiagTooLate}
}

// raDateErrors maps each malformed-date error of httpdate to its reason.
// The errors are held as interface values, so that comparing them does not
// allocate.
var raDateErrors = [...]struct {
	err    error
	reason raReason
}{
	{httpdate.ErrLayout, raReasonDateLayout},
	{httpdate.ErrDayName, raReasonDateDayName},
	{httpdate.ErrMonth, raReasonDateMonth},
	{httpdate.ErrDigits, raReasonDateDigits},
	{httpdate.ErrDayRange, raReasonDateRange},
	{httpdate.ErrClock, raReasonDateClock},
	{httpdate.ErrZone, raReasonDateZone},
	{httpdate.ErrWeekday, raReasonDateWeekday},
}

// raSpell says which number the public diagnostic spells out where the
// transport's constant one does not.
type raSpell uint8

const (
	raSpellNone     raSpell = iota
	raSpellKeys             // n keys differing in case
	raSpellValues           // n values
	raSpellOverlong         // a delay of n seconds above the ceiling
)

// raParser holds one parse's receipt time and the caller's timing, which it
// fills when the result has one.
type raParser struct {
	recv   int64
	timed  bool // the receipt time is known
	timing *RetryAfterTiming
	spell  raSpell
	n      int64
}

// parse is the whole of ParseRetryAfter with constant diagnostics.
func (p *raParser) parse(h http.Header, receivedAt time.Time) (RetryAfter, bool, string) {
	var f raFields
	f.lookup(h)
	return p.parseField(&f.ra, receivedAt)
}

// parseField is parse on a field already looked up.
func (p *raParser) parseField(f *raField, receivedAt time.Time) (RetryAfter, bool, string) {
	if p.timed = !receivedAt.IsZero(); p.timed {
		p.recv = receivedAt.Unix()
	}
	value, keys, values := f.value, f.keys, f.values
	switch {
	case f.oversize:
		// fail-closed-oversized: whatever else the field holds.
		return RetryAfter{Kind: RetryAfterOversized}, false, raDiagOversized
	case keys > 1:
		p.spell, p.n = raSpellKeys, int64(keys)
		return p.fallback(RetryAfterInvalid, raReasonDupKeys)
	case values > 1:
		p.spell, p.n = raSpellValues, int64(values)
		return p.fallback(RetryAfterInvalid, raReasonDupValues)
	case values == 0:
		return p.fallback(RetryAfterMissing, raReasonMissing)
	}

	v := raTrimOWS(value)
	if v == "" {
		return p.fallback(RetryAfterInvalid, raReasonEmpty)
	}
	switch c := v[0]; {
	case '0' <= c && c <= '9':
		return p.delaySeconds(v)
	case ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z'):
		return p.date(v)
	default:
		return p.fallback(RetryAfterInvalid, raReasonNeither)
	}
}

// raField is what the keys of one field name held: how many keys match
// the name in some ASCII case and how many values they hold in total,
// whether any value is longer than MaxRetryAfterBytes, and the first value
// of a key that has one (the value, when there is exactly one).
type raField struct {
	keys, values int
	oversize     bool
	value        string
}

func (f *raField) add(vs []string) {
	f.keys++
	f.values += len(vs)
	for _, v := range vs {
		if len(v) > MaxRetryAfterBytes {
			f.oversize = true
		}
	}
	if len(vs) > 0 {
		f.value = vs[0]
	}
}

// raFields are the three fields a 429's wait is read from: Retry-After and
// Azure's two millisecond fields (retryafterms.go).
type raFields struct {
	ra raField
	ms [raMsFields]raField
}

// lookup finds the three fields among every key of h, in one pass
// (strict-retry-after: a case variant can sit under any key, so a direct
// lookup of the canonical key would not spare the pass). Go's map
// iteration, not the comparison, is most of the cost (see
// BenchmarkBaselineHeaderRange): a key is compared only when its length is
// one of the three names', the canonical spelling first.
func (f *raFields) lookup(h http.Header) {
	for k, vs := range h {
		switch len(k) {
		case len(raKey):
			if k == raKey || raASCIIFoldEqual(k, "retry-after") {
				f.ra.add(vs)
			}
		case len(raMsName):
			if k == raMsKey || raASCIIFoldEqual(k, raMsName) {
				f.ms[0].add(vs)
			}
		case len(raXMsName):
			if k == raXMsKey || raASCIIFoldEqual(k, raXMsName) {
				f.ms[1].add(vs)
			}
		}
	}
}

// spelledDiag returns the diagnostic ParseRetryAfter gives where the parse
// recorded a number to spell out.
func (p *raParser) spelledDiag(hasTiming bool) string {
	var reason string
	switch p.spell {
	case raSpellOverlong:
		return raDiagOverlongPf + strconv.FormatInt(p.n, 10) + raDiagOverlongSf
	case raSpellKeys:
		reason = raDiagPrefix + strconv.FormatInt(p.n, 10) + " keys differing in case"
	default:
		reason = raDiagPrefix + strconv.FormatInt(p.n, 10) + " values"
	}
	switch {
	case !p.timed:
		return reason + raDiagNoReceipt
	case hasTiming:
		return reason + raDiagFallback
	default:
		return reason + raDiagFallback + raDiagTooLate
	}
}

// raTrimOWS removes leading and trailing SP and HTAB (RFC 9110 OWS).
func raTrimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// setTiming fills the timing of a delay of d ≥ 0 seconds after the receipt
// and reports whether the not-before receipt+d is representable: at most
// unixtime.Max, the bound the journal and the command share (a later one
// is unresolved, never a persistence failure).
func (p *raParser) setTiming(d int64) bool {
	if d < 0 || d > unixtime.Max || p.recv > unixtime.Max-d {
		return false
	}
	*p.timing = RetryAfterTiming{ReceivedAtUTC: p.recv, NotBeforeUTC: p.recv + d, ServerDelaySeconds: d}
	return true
}

// fallback returns the diagnosed 1-second fallback of a missing or invalid
// field (diagnosed-fallback).
func (p *raParser) fallback(kind RetryAfterKind, r raReason) (RetryAfter, bool, string) {
	d := &raFallbackDiags[r]
	switch {
	case !p.timed:
		return RetryAfter{Kind: kind}, false, d.noReceipt
	case !p.setTiming(fallbackDelaySeconds):
		return RetryAfter{Kind: kind}, false, d.tooLate
	default:
		return RetryAfter{Kind: kind}, true, d.fallback
	}
}

// resolved returns the result of a valid delay d ≥ 0 of the given kind: a
// wait up to the ceiling, overlong above it (stop-not-shorten).
func (p *raParser) resolved(kind RetryAfterKind, d int64) (RetryAfter, bool, string) {
	if d > raMaxWaitSeconds {
		kind = RetryAfterOverlong
	}
	if p.timed && !p.setTiming(d) {
		return RetryAfter{Kind: RetryAfterOverlong}, false, raDiagUnrepr
	}
	if kind == RetryAfterOverlong {
		p.spell, p.n = raSpellOverlong, d
		return RetryAfter{Kind: kind}, p.timed, raDiagOverlong
	}
	return RetryAfter{Kind: kind, Value: d}, p.timed, ""
}

// delaySeconds handles a trimmed value that starts with an ASCII digit.
func (p *raParser) delaySeconds(v string) (RetryAfter, bool, string) {
	var n int64
	overflow := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return p.fallback(RetryAfterInvalid, raReasonNotDigits)
		}
		if overflow {
			continue // keep checking that the rest is digits
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			overflow = true
			continue
		}
		n = n*10 + d
	}
	if overflow {
		return RetryAfter{Kind: RetryAfterOverlong}, false, raDiagUnrepr
	}
	return p.resolved(RetryAfterSeconds, n)
}

// date handles a trimmed value that starts with an ASCII letter.
func (p *raParser) date(v string) (RetryAfter, bool, string) {
	if !p.timed {
		// Without a receipt time the date cannot be resolved; a malformed
		// one is still diagnosed as such.
		if _, err := httpdate.Validate(v); err != nil {
			return p.fallback(RetryAfterInvalid, raDateReason(err))
		}
		return RetryAfter{Kind: RetryAfterInvalid}, false, raDiagNoTiming
	}
	date, _, err := httpdate.Parse(v, p.recv)
	switch {
	case errors.Is(err, httpdate.ErrYearUnresolvable):
		return RetryAfter{Kind: RetryAfterOverlong}, false, raDiagYearUnres
	case err != nil:
		return p.fallback(RetryAfterInvalid, raDateReason(err))
	}
	// date is within years 0000-9999, recv is any int64: the difference can
	// overflow only when recv is far in the past.
	if p.recv < 0 && date > math.MaxInt64+p.recv {
		return RetryAfter{Kind: RetryAfterOverlong}, false, raDiagUnrepr
	}
	return p.resolved(RetryAfterDate, max(date-p.recv, 0)) // a past date means no wait
}

// raDateReason returns the reason of a malformed-date error of httpdate.
func raDateReason(err error) raReason {
	for _, d := range raDateErrors {
		if errors.Is(err, d.err) {
			return d.reason
		}
	}
	return raReasonDateLayout // not reached: httpdate returns only those errors
}
