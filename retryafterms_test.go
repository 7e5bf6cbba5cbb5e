package readrecovery

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

type retryAfterMsCase struct {
	name string
	h    http.Header
	ms   int64
	kind RetryAfterKind
	diag string
}

// raMsHdr returns raHdr("5") (a 429 with Retry-After: 5) plus the given
// raw keys.
func raMsHdr(kv map[string][]string) http.Header {
	h := raHdr("5")
	for k, v := range kv {
		h[k] = v
	}
	return h
}

func retryAfterMsCases() []retryAfterMsCase {
	const (
		dupValues   = "retry-after-ms: several values; ignored"
		dupKeys     = "retry-after-ms: several keys differing in case; ignored"
		notDigits   = "retry-after-ms: not 1*DIGIT; ignored"
		xNotDigits  = "x-ms-retry-after-ms: not 1*DIGIT; ignored"
		overlong    = "retry-after-ms: delay above 30 s ceiling; sequence stops"
		xOverlong   = "x-ms-retry-after-ms: delay above 30 s ceiling; sequence stops"
		oversized   = "retry-after-ms: value longer than 128 bytes; fail closed, no wait"
		xOversized  = "x-ms-retry-after-ms: value longer than 128 bytes; fail closed, no wait"
		xDupKeys    = "x-ms-retry-after-ms: several keys differing in case; ignored"
		empty       = "retry-after-ms: empty value; ignored"
		canonical   = "Retry-After-Ms"
		xCanonical  = "X-Ms-Retry-After-Ms"
		maxInt64    = "9223372036854775807"
		beyondInt64 = "92233720368547758080"
	)
	d128 := strings.Repeat("0", 124) + "2500"
	d129 := "0" + d128
	one := func(k, v string) http.Header { return raMsHdr(map[string][]string{k: {v}}) }
	return []retryAfterMsCase{
		// Missing: the usual case, no diagnostic.
		{"millisecond-floor/missing among Azure headers", raHdr("5"), 0, RetryAfterMissing, ""},
		{"millisecond-floor/nil header is missing", nil, 0, RetryAfterMissing, ""},
		{"field-lookup/key with no value is missing", raMsHdr(map[string][]string{canonical: {}}), 0, RetryAfterMissing, ""},
		{"field-lookup/near-miss keys do not match", raMsHdr(map[string][]string{"Retry-After-Msx": {"2500"}, "Retry_After_Ms": {"2500"}, "X-Ms-Retry-After": {"2500"}, "Ms-Retry-After-Ms": {"2500"}}), 0, RetryAfterMissing, ""},

		// strict-retry-after: 1*DIGIT in milliseconds, each name, any key case.
		{"millisecond-floor/retry-after-ms 2500", one(canonical, "2500"), 2500, RetryAfterSeconds, ""},
		{"millisecond-floor/x-ms-retry-after-ms 2500", one(xCanonical, "2500"), 2500, RetryAfterSeconds, ""},
		{"field-lookup/lower-case key", one("retry-after-ms", "2500"), 2500, RetryAfterSeconds, ""},
		{"field-lookup/upper-case x-ms key", one("X-MS-RETRY-AFTER-MS", "40"), 40, RetryAfterSeconds, ""},
		{"delay-seconds/zero", one(canonical, "0"), 0, RetryAfterSeconds, ""},
		{"delay-seconds/leading zeros", one(canonical, "0007"), 7, RetryAfterSeconds, ""},
		{"delay-seconds/OWS trimmed", one(canonical, " \t2500\t "), 2500, RetryAfterSeconds, ""},
		{"delay-seconds/negative is invalid", one(canonical, "-2500"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/plus sign is invalid", one(canonical, "+2500"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/decimal point is invalid", one(canonical, "2500.5"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/seconds with a unit are invalid", one(canonical, "2.5s"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/inner space is invalid", one(canonical, "25 00"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/fullwidth digit is invalid", one(canonical, "\uff12500"), 0, RetryAfterInvalid, notDigits},
		{"delay-seconds/HTTP-date is invalid", one(canonical, "Sun, 06 Nov 1994 08:49:47 GMT"), 0, RetryAfterInvalid, notDigits},
		{"fallback/empty value is invalid", one(canonical, ""), 0, RetryAfterInvalid, empty},
		{"fallback/whitespace-only value is invalid", one(canonical, " \t"), 0, RetryAfterInvalid, empty},
		{"delay-seconds/x-ms non-numeric is invalid", one(xCanonical, "soon"), 0, RetryAfterInvalid, xNotDigits},

		// stop-not-shorten: the 30 s ceiling in milliseconds; never shortened.
		{"overlong/30000 ms is the last valid floor", one(canonical, "30000"), 30000, RetryAfterSeconds, ""},
		{"overlong/30001 ms is overlong", one(canonical, "30001"), 0, RetryAfterOverlong, overlong},
		{"overlong/max int64 is overlong", one(canonical, maxInt64), 0, RetryAfterOverlong, overlong},
		{"overlong/digits beyond int64 are overlong", one(canonical, beyondInt64), 0, RetryAfterOverlong, overlong},
		{"overlong/x-ms overlong", one(xCanonical, "60000"), 0, RetryAfterOverlong, xOverlong},

		// fail-closed-oversized: oversized fails closed.
		{"oversized/128-byte value is valid", one(canonical, d128), 2500, RetryAfterSeconds, ""},
		{"oversized/129-byte value is oversized", one(canonical, d129), 0, RetryAfterOversized, oversized},
		{"oversized/oversized wins over duplicate values", raMsHdr(map[string][]string{canonical: {"5", d129}}), 0, RetryAfterOversized, oversized},
		{"oversized/oversized x-ms wins over a valid retry-after-ms", raMsHdr(map[string][]string{canonical: {"2500"}, xCanonical: {d129}}), 0, RetryAfterOversized, xOversized},

		// strict-retry-after, diagnosed-fallback: duplicates of one name are invalid, whatever the values.
		{"field-lookup/two values", raMsHdr(map[string][]string{canonical: {"2500", "2500"}}), 0, RetryAfterInvalid, dupValues},
		{"field-lookup/two keys differing in case", raMsHdr(map[string][]string{canonical: {"2500"}, "retry-after-ms": {"2500"}}), 0, RetryAfterInvalid, dupKeys},
		{"field-lookup/second key with no value is a duplicate key", raMsHdr(map[string][]string{canonical: {"2500"}, "RETRY-AFTER-MS": {}}), 0, RetryAfterInvalid, dupKeys},
		{"field-lookup/two x-ms keys", raMsHdr(map[string][]string{xCanonical: {"2500"}, "x-ms-retry-after-ms": {"3000"}}), 0, RetryAfterInvalid, xDupKeys},

		// Both names: two fields; the longer valid one is the floor.
		{"millisecond-floor/both names equal", raMsHdr(map[string][]string{canonical: {"2500"}, xCanonical: {"2500"}}), 2500, RetryAfterSeconds, ""},
		{"millisecond-floor/both names differ: the longer applies", raMsHdr(map[string][]string{canonical: {"2500"}, xCanonical: {"4000"}}), 4000, RetryAfterSeconds, ""},
		{"millisecond-floor/both names differ the other way", raMsHdr(map[string][]string{canonical: {"4000"}, xCanonical: {"2500"}}), 4000, RetryAfterSeconds, ""},
		{"millisecond-floor/malformed second name keeps the first's floor", raMsHdr(map[string][]string{canonical: {"2500"}, xCanonical: {"-1"}}), 2500, RetryAfterInvalid, xNotDigits},
		{"millisecond-floor/duplicated first name keeps the second's floor", raMsHdr(map[string][]string{canonical: {"1", "2"}, xCanonical: {"2500"}}), 2500, RetryAfterInvalid, dupValues},
		{"millisecond-floor/both malformed: the first speaks", raMsHdr(map[string][]string{canonical: {"x"}, xCanonical: {"y"}}), 0, RetryAfterInvalid, notDigits},
		{"millisecond-floor/overlong second name stops despite a valid first", raMsHdr(map[string][]string{canonical: {"2500"}, xCanonical: {"30001"}}), 0, RetryAfterOverlong, xOverlong},
		{"millisecond-floor/overlong wins over invalid", raMsHdr(map[string][]string{canonical: {"x"}, xCanonical: {"99999"}}), 0, RetryAfterOverlong, xOverlong},
	}
}

func TestParseRetryAfterMs(t *testing.T) {
	for _, tc := range retryAfterMsCases() {
		t.Run(tc.name, func(t *testing.T) {
			ms, kind, diag := parseRetryAfterMs(tc.h)
			if ms != tc.ms || kind != tc.kind || diag != tc.diag {
				t.Errorf("parseRetryAfterMs = %d, %s, %q; want %d, %s, %q", ms, kind, diag, tc.ms, tc.kind, tc.diag)
			}
			checkRetryAfterMsInvariants(t, ms, kind, diag)
			if n := testing.AllocsPerRun(10, func() { parseRetryAfterMs(tc.h) }); n != 0 {
				t.Errorf("%v allocations, want 0", n)
			}
		})
	}
}

// TestParseRetryAfterMsDiagnosticsNumbers ties the numbers in the constant
// diagnostics to the constants they name.
func TestParseRetryAfterMsDiagnosticsNumbers(t *testing.T) {
	for _, d := range raMsDiags {
		if want := "above " + strconv.FormatInt(raMaxWaitSeconds, 10) + " s ceiling"; !strings.Contains(d.overlong, want) {
			t.Errorf("%q does not say %q", d.overlong, want)
		}
		if want := "longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"; !strings.Contains(d.oversized, want) {
			t.Errorf("%q does not say %q", d.oversized, want)
		}
	}
	if raMaxWait != 30000 {
		t.Errorf("ceiling %d ms, want 30000", raMaxWait)
	}
}

// checkRetryAfterMsInvariants asserts what holds for every result.
func checkRetryAfterMsInvariants(t *testing.T, ms int64, kind RetryAfterKind, diag string) {
	t.Helper()
	if ms < 0 || ms > raMaxWait {
		t.Errorf("floor %d ms outside 0..%d", ms, raMaxWait)
	}
	switch kind {
	case RetryAfterSeconds, RetryAfterMissing:
		if diag != "" {
			t.Errorf("%s with diagnostic %q", kind, diag)
		}
		if kind == RetryAfterMissing && ms != 0 {
			t.Errorf("missing with floor %d", ms)
		}
	case RetryAfterInvalid:
		if diag == "" {
			t.Errorf("invalid without diagnostic")
		}
	case RetryAfterOverlong, RetryAfterOversized:
		if ms != 0 || diag == "" {
			t.Errorf("%s with floor %d, diagnostic %q: want 0 and a diagnostic", kind, ms, diag)
		}
	default:
		t.Errorf("kind %q", kind)
	}
	if diag != "" {
		found := false
		for _, d := range raMsDiags {
			for _, s := range []string{d.oversized, d.dupKeys, d.dupValues, d.empty, d.notDigits, d.overlong} {
				found = found || s == diag
			}
		}
		if !found {
			t.Errorf("diagnostic %q is not one of the constants", diag)
		}
	}
}
