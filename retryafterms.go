package readrecovery

import (
	"net/http"
	"strconv"
	"time"

	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// The two names under which Azure services send a delay in milliseconds, in
// lower case; azcore reads them before Retry-After.
const (
	raMsName   = "retry-after-ms"
	raXMsName  = "x-ms-retry-after-ms"
	raMsKey    = "Retry-After-Ms" // canonical spellings, compared first
	raXMsKey   = "X-Ms-Retry-After-Ms"
	raMaxWait  = int64(MaxServerWait / time.Millisecond)
	raMsFields = 2
)

// parseRetryAfterMs reads Azure's millisecond delay fields, retry-after-ms
// and x-ms-retry-after-ms, as a floor on the wait (docs/policy.md:
// millisecond-floor): the transport waits max(the Retry-After delay, ms)
// and stops on a kind that stops. It never allocates, and its diagnostic is
// a constant that names the field and never repeats its value ("" for a
// clean or absent field).
//
// Each of the two names is one field, judged alone by the Retry-After
// rules: its key matches in any ASCII case; two values, or two keys that
// differ only in case, are a duplicate, [RetryAfterInvalid]; any value
// longer than [MaxRetryAfterBytes] is [RetryAfterOversized], and wins over
// a duplicate; the value, trimmed of SP and HTAB, must be 1*DIGIT, leading
// zeros allowed, so a sign, a decimal point, an empty or non-ASCII value is
// [RetryAfterInvalid]; a value above [MaxServerWait] in milliseconds,
// including one beyond int64, is [RetryAfterOverlong] (the sequence stops,
// the wait is never shortened); a valid value is [RetryAfterSeconds] (the
// delay form; the unit here is the millisecond).
//
// The two names are two fields, not a duplicate: Azure services send either
// or both. The result is the more severe of the two kinds, in the order
// oversized, overlong, invalid, valid, missing (on a tie, retry-after-ms
// speaks), and ms is the larger of the valid values, so a malformed or
// missing second field never shortens what the other asked for:
//
//   - oversized or overlong: ms is 0; the sequence stops;
//   - valid: ms is the floor, diag is "";
//   - invalid: ms is the other field's valid value if there is one, else 0,
//     and diag says which field was malformed;
//   - missing (neither field present, or only keys with no value): ms 0,
//     diag "".
func parseRetryAfterMs(h http.Header) (ms int64, kind RetryAfterKind, diag string) {
	var f raFields
	f.lookup(h)
	return judgeRetryAfterMs(&f.ms)
}

// judgeRetryAfterMs is parseRetryAfterMs on the two fields already looked
// up (raFields.lookup).
func judgeRetryAfterMs(found *[raMsFields]raField) (ms int64, kind RetryAfterKind, diag string) {
	var f [raMsFields]raMsField
	for i := range f {
		f[i].raField = found[i]
	}

	best := -1 // the field that speaks
	var bestSev raMsSeverity
	for i := range f {
		f[i].judge(i)
		if f[i].sev > bestSev {
			best, bestSev = i, f[i].sev
		}
		if f[i].sev == raMsValid && f[i].ms > ms {
			ms = f[i].ms
		}
	}
	switch bestSev {
	case raMsAbsent:
		return 0, RetryAfterMissing, ""
	case raMsValid:
		return ms, RetryAfterSeconds, ""
	case raMsInvalid:
		return ms, RetryAfterInvalid, f[best].diag
	case raMsOverlong:
		return 0, RetryAfterOverlong, f[best].diag
	default:
		return 0, RetryAfterOversized, f[best].diag
	}
}

// raMsSeverity orders the outcomes of one millisecond field.
type raMsSeverity uint8

const (
	raMsAbsent raMsSeverity = iota
	raMsValid
	raMsInvalid
	raMsOverlong
	raMsOversized
)

// raMsField is what one of the two names held, and its judgment.
type raMsField struct {
	raField

	sev  raMsSeverity
	ms   int64
	diag string
}

// raMsDiags are the diagnostics of the two fields, by field index.
var raMsDiags = [raMsFields]struct {
	oversized, dupKeys, dupValues, empty, notDigits, overlong string
}{
	{
		oversized: raMsName + ": value longer than " + raBoundText + "; fail closed, no wait",
		dupKeys:   raMsName + ": several keys differing in case; ignored",
		dupValues: raMsName + ": several values; ignored",
		empty:     raMsName + ": empty value; ignored",
		notDigits: raMsName + ": not 1*DIGIT; ignored",
		overlong:  raMsName + ": delay above " + raCeilingText + "; sequence stops",
	},
	{
		oversized: raXMsName + ": value longer than " + raBoundText + "; fail closed, no wait",
		dupKeys:   raXMsName + ": several keys differing in case; ignored",
		dupValues: raXMsName + ": several values; ignored",
		empty:     raXMsName + ": empty value; ignored",
		notDigits: raXMsName + ": not 1*DIGIT; ignored",
		overlong:  raXMsName + ": delay above " + raCeilingText + "; sequence stops",
	},
}

// judge sets the severity, value and diagnostic of field i, in the order of
// precedence of ParseRetryAfter.
func (f *raMsField) judge(i int) {
	d := &raMsDiags[i]
	switch {
	case f.oversize:
		f.sev, f.diag = raMsOversized, d.oversized
		return
	case f.keys > 1:
		f.sev, f.diag = raMsInvalid, d.dupKeys
		return
	case f.values > 1:
		f.sev, f.diag = raMsInvalid, d.dupValues
		return
	case f.values == 0:
		f.sev = raMsAbsent
		return
	}
	v := raTrimOWS(f.value)
	if v == "" {
		f.sev, f.diag = raMsInvalid, d.empty
		return
	}
	var n int64
	for j := 0; j < len(v); j++ {
		c := v[j]
		if c < '0' || c > '9' {
			f.sev, f.diag = raMsInvalid, d.notDigits
			return
		}
		if n <= raMaxWait { // past the ceiling the exact value no longer matters
			n = n*10 + int64(c-'0')
		}
	}
	if n > raMaxWait {
		f.sev, f.diag = raMsOverlong, d.overlong
		return
	}
	f.sev, f.ms = raMsValid, n
}

// raASCIIFoldEqual reports whether k equals the lower-case name in any ASCII
// case; name holds only lower-case letters and '-'. The lengths are equal.
func raASCIIFoldEqual(k, name string) bool {
	for i := 0; i < len(name); i++ {
		c, n := k[i], name[i]
		if n == '-' {
			if c != '-' {
				return false
			}
			continue
		}
		// Only letters are folded: bit 0x20 is the ASCII case bit, and n is a
		// lower-case letter, so c|0x20 == n holds for exactly n and upper(n).
		if c|0x20 != n {
			return false
		}
	}
	return true
}

// waitOf turns a parsed Retry-After and Azure's millisecond floor into the
// server's delay, or says why it must not be waited: oversized,
// unrepresentable or above MaxServerWait (the Budget's own, lower ceiling
// is the policy's to apply). A valid millisecond field is a floor whatever
// the other fields hold (ms is the larger valid one: docs/policy.md:
// millisecond-floor); floorMs is non-zero when it made the wait longer.
func waitOf(ra RetryAfter, timing *RetryAfterTiming, ms int64, msKind RetryAfterKind) (delay time.Duration, floorMs int64, refuse StopReason, detail string) {
	switch {
	case ra.Kind == RetryAfterOversized:
		return 0, 0, StopOversized, detailOversized
	case msKind == RetryAfterOversized:
		return 0, 0, StopOversized, detailMsOversized
	case timing == nil:
		return 0, 0, StopOverlong, "the Retry-After delay is not representable"
	case ra.Kind == RetryAfterOverlong:
		return 0, 0, StopOverlong, detailOverlong
	case msKind == RetryAfterOverlong:
		return 0, 0, StopOverlong, detailMsOverlong
	}
	delay = time.Duration(timing.ServerDelaySeconds) * time.Second
	if f := time.Duration(ms) * time.Millisecond; f > delay {
		delay, floorMs = f, ms
	}
	return delay, floorMs, "", ""
}

// The parser-side details, formatted from the constants they name.
var (
	detailOversized   = "the Retry-After field is longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"
	detailMsOversized = "a millisecond wait field is longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"
	detailOverlong    = "the Retry-After delay is above the " + MaxServerWait.String() + " ceiling"
	detailMsOverlong  = "the millisecond floor is above the " + MaxServerWait.String() + " ceiling"
)

// withFloor returns the timing a journal keeps for a 429: the Retry-After
// field's, with its not-before moved out to a longer millisecond floor ms,
// rounded up to the whole second (the journal keeps whole seconds).
func withFloor(t *RetryAfterTiming, receivedAt time.Time, ms int64) *RetryAfterTiming {
	if t == nil || ms <= 0 {
		return t
	}
	end := receivedAt.Add(time.Duration(ms) * time.Millisecond)
	nb := end.Unix()
	if end.After(time.Unix(nb, 0)) {
		nb++
	}
	if nb <= t.NotBeforeUTC {
		return t
	}
	if nb > unixtime.Max {
		return nil // not representable: unresolved, never a failed write
	}
	f := *t
	f.NotBeforeUTC, f.ServerDelaySeconds = nb, nb-t.ReceivedAtUTC
	return &f
}

// joinDiag joins two diagnostics.
func joinDiag(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
