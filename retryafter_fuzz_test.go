package readrecovery

import (
	"github.com/readrecovery/readrecovery/internal/unixtime"

	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Header shapes of FuzzParseRetryAfter, chosen by variant&7.
const (
	raFuzzOne         = iota // Retry-After: value
	raFuzzTwoValues          // Retry-After: value, extra
	raFuzzTwoKeys            // Retry-After: value; retry-after: extra
	raFuzzLowerKey           // retry-after: value
	raFuzzNoField            // no field; extra under X-Ms-Request-Id
	raFuzzKeyVariant         // <extra as the key>: value
	raFuzzEmptySecond        // RETRY-AFTER: value; Retry-After: (no value)
	raFuzzEmptyList          // Retry-After: (no value)
	raFuzzZeroReceipt = 0x80 // receivedAt is the zero time.Time
)

// FuzzParseRetryAfter checks the invariants of [ParseRetryAfter] on any header
// value, a second value or key spelling, and any receipt time in Unix seconds,
// and that the transport's parseRetryAfterAt agrees with it.
// Its seed corpus (every table value) runs in every go test.
func FuzzParseRetryAfter(f *testing.F) {
	for _, tc := range retryAfterCases() {
		variant := uint8(raFuzzOne)
		if tc.recv.IsZero() {
			variant |= raFuzzZeroReceipt
		}
		recv := tc.recv.Unix()
		for k, vs := range tc.h {
			if !strings.EqualFold(k, "Retry-After") {
				continue
			}
			for i, v := range vs {
				f.Add(v, "", variant, recv)
				f.Add(v, k, variant|raFuzzKeyVariant, recv)
				if i > 0 {
					f.Add(vs[0], v, variant|raFuzzTwoValues, recv)
					f.Add(vs[0], v, variant|raFuzzTwoKeys, recv)
				}
			}
		}
	}
	f.Add("5", "", uint8(raFuzzNoField), raT0.Unix())
	f.Add("5", "", uint8(raFuzzEmptySecond), raT0.Unix())
	f.Add("5", "", uint8(raFuzzEmptyList), raT0.Unix())
	f.Add("Sun, 06 Nov 1994 08:49:47 GMT", "", uint8(raFuzzOne), int64(math.MinInt64))
	f.Add("Saturday, 14-Mar-76 12:00:00 GMT", "", uint8(raFuzzOne), int64(math.MaxInt64))

	f.Fuzz(func(t *testing.T, value, extra string, variant uint8, recvUnix int64) {
		recv := time.Unix(recvUnix, 0)
		if variant&raFuzzZeroReceipt != 0 {
			recv = time.Time{}
		}
		h := raHdr()
		matched := true // the shape holds exactly one field value, value
		switch variant & 7 {
		case raFuzzOne:
			h["Retry-After"] = []string{value}
		case raFuzzTwoValues:
			h["Retry-After"] = []string{value, extra}
		case raFuzzTwoKeys:
			h["Retry-After"] = []string{value}
			h["retry-after"] = []string{extra}
		case raFuzzLowerKey:
			h["retry-after"] = []string{value}
		case raFuzzNoField:
			h["X-Ms-Request-Id"] = []string{extra}
			matched = false
		case raFuzzKeyVariant:
			h[extra] = []string{value}
			matched = raASCIIEqualFold(extra, "retry-after")
		case raFuzzEmptySecond:
			h["RETRY-AFTER"] = []string{value}
			h["Retry-After"] = nil
		case raFuzzEmptyList:
			h["Retry-After"] = []string{}
			matched = false
		}

		got, timing, diag := ParseRetryAfter(h, recv)
		checkRetryAfterInvariants(t, h, recv, got, timing, diag)
		checkRetryAfterAtAgrees(t, h, recv, got, timing, diag)

		oversized := len(value) > MaxRetryAfterBytes
		switch variant & 7 {
		case raFuzzTwoValues, raFuzzTwoKeys:
			oversized = oversized || len(extra) > MaxRetryAfterBytes
			raWantKind(t, got, oversized, RetryAfterInvalid)
			return
		case raFuzzEmptySecond:
			raWantKind(t, got, oversized, RetryAfterInvalid)
			return
		}
		if !matched {
			if got.Kind != RetryAfterMissing {
				t.Fatalf("no Retry-After key, got %+v", got)
			}
			return
		}
		if oversized {
			if got.Kind != RetryAfterOversized {
				t.Fatalf("%d-byte value, got %+v", len(value), got)
			}
			return
		}

		// One value under any spelling of the key gives what the canonical
		// key gives.
		canon, ctiming, cdiag := ParseRetryAfter(http.Header{"Retry-After": {value}}, recv)
		if canon != got || (ctiming == nil) != (timing == nil) || (timing != nil && *ctiming != *timing) || cdiag != diag {
			t.Fatalf("key spelling changed the result: %+v %v %q vs %+v %v %q", got, timing, diag, canon, ctiming, cdiag)
		}

		trimmed := strings.Trim(value, " \t")
		raCheckSecondsOracle(t, trimmed, recv, got, timing)
		raCheckDateOracle(t, trimmed, recv, got, timing)
	})
}

func raWantKind(t *testing.T, got RetryAfter, oversized bool, otherwise RetryAfterKind) {
	t.Helper()
	want := otherwise
	if oversized {
		want = RetryAfterOversized
	}
	if got.Kind != want {
		t.Fatalf("got %+v, want kind %s", got, want)
	}
}

// raCheckSecondsOracle compares an all-digit value with strconv.
func raCheckSecondsOracle(t *testing.T, trimmed string, recv time.Time, got RetryAfter, timing *RetryAfterTiming) {
	t.Helper()
	if trimmed == "" || strings.Trim(trimmed, "0123456789") != "" {
		if got.Kind == RetryAfterSeconds {
			t.Fatalf("%q is not 1*DIGIT but parsed as %+v", trimmed, got)
		}
		return
	}
	n, err := strconv.ParseInt(trimmed, 10, 64)
	switch {
	case err != nil: // beyond int64
		if got.Kind != RetryAfterOverlong || timing != nil {
			t.Fatalf("%q overflows int64, got %+v %v", trimmed, got, timing)
		}
	case !recv.IsZero() && (n > unixtime.Max || recv.Unix() > unixtime.Max-n):
		if got.Kind != RetryAfterOverlong || timing != nil {
			t.Fatalf("%q after %d overflows, got %+v %v", trimmed, recv.Unix(), got, timing)
		}
	case n > 30:
		if got.Kind != RetryAfterOverlong || (!recv.IsZero() && (timing == nil || timing.ServerDelaySeconds != n)) {
			t.Fatalf("%q is overlong, got %+v %v", trimmed, got, timing)
		}
	default:
		if got != (RetryAfter{Kind: RetryAfterSeconds, Value: n}) {
			t.Fatalf("%q, got %+v", trimmed, got)
		}
	}
}

// raCheckDateOracle compares an accepted IMF-fixdate or asctime value with
// time.Parse, which accepts a superset of those two forms (no weekday check,
// no leap second).
func raCheckDateOracle(t *testing.T, trimmed string, recv time.Time, got RetryAfter, timing *RetryAfterTiming) {
	t.Helper()
	if got.Kind != RetryAfterDate && !(got.Kind == RetryAfterOverlong && timing != nil) {
		return
	}
	if len(trimmed) == 0 || trimmed[0] < 'A' || strings.HasSuffix(trimmed, ":60 GMT") || strings.Contains(trimmed, ":60 ") {
		return // seconds, or a leap second time.Parse refuses
	}
	var layout string
	switch {
	case len(trimmed) == 29:
		layout = http.TimeFormat
	case len(trimmed) == 24:
		layout = time.ANSIC
	default:
		return // RFC 850: time.Parse pivots two-digit years differently
	}
	want, err := time.Parse(layout, trimmed)
	if err != nil {
		t.Fatalf("accepted %q that time.Parse refuses: %v", trimmed, err)
	}
	if want.Weekday().String()[:3] != trimmed[:3] {
		t.Fatalf("accepted %q with a weekday that is not %s", trimmed, want.Weekday())
	}
	if timing == nil {
		t.Fatalf("date %q without timing", trimmed)
	}
	d := want.Unix() - recv.Unix()
	if d < 0 {
		d = 0
	}
	if timing.ServerDelaySeconds != d {
		t.Fatalf("%q received at %d: delay %d, want %d", trimmed, recv.Unix(), timing.ServerDelaySeconds, d)
	}
}

// raASCIIEqualFold is the reference for key matching: ASCII case folding
// only (strings.EqualFold would also fold some non-ASCII letters).
func raASCIIEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
