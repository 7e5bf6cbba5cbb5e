package readrecovery

import (
	"github.com/readrecovery/readrecovery/internal/unixtime"

	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Receipt times of the table. t0 is the RFC 9110 example date.
var (
	raT0    = time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC) // Sun, 06 Nov 1994 08:49:37 GMT
	raT2026 = time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)    // Saturday
	raTLeap = time.Date(2016, time.December, 31, 23, 59, 50, 0, time.UTC)
)

type retryAfterCase struct {
	name       string
	h          http.Header
	recv       time.Time
	want       RetryAfter
	wantTiming *RetryAfterTiming // nil: no timing expected
	wantDiag   bool              // true: a non-empty diagnostic expected
}

// raHdr returns a realistic Azure response header map plus the given
// Retry-After values under the canonical key (none: no field).
func raHdr(values ...string) http.Header {
	h := http.Header{
		"Content-Type":              {"application/json; charset=utf-8"},
		"Date":                      {"Sun, 06 Nov 1994 08:49:37 GMT"},
		"X-Ms-Request-Id":           {"0f8fad5b-d9cb-469f-a165-70867728950e"},
		"X-Ms-Client-Request-Id":    {"7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		"X-Ms-Version":              {"2025-05-05"},
		"Server":                    {"Windows-Azure-Blob/1.0 Microsoft-HTTPAPI/2.0"},
		"Content-Length":            {"241"},
		"Strict-Transport-Security": {"max-age=31536000; includeSubDomains"},
	}
	if len(values) > 0 {
		h["Retry-After"] = values
	}
	return h
}

// raWith returns raHdr() with raw (possibly non-canonical) keys added.
func raWith(kv map[string][]string) http.Header {
	h := raHdr()
	for k, v := range kv {
		h[k] = v
	}
	return h
}

// raTiming is the expected timing of a delay of d seconds after recv.
func raTiming(recv time.Time, d int64) *RetryAfterTiming {
	r := recv.Unix()
	return &RetryAfterTiming{ReceivedAtUTC: r, NotBeforeUTC: r + d, ServerDelaySeconds: d}
}

func raSeconds(n int64) RetryAfter { return RetryAfter{Kind: RetryAfterSeconds, Value: n} }
func raDate(n int64) RetryAfter    { return RetryAfter{Kind: RetryAfterDate, Value: n} }

var (
	raMissing   = RetryAfter{Kind: RetryAfterMissing}
	raInvalid   = RetryAfter{Kind: RetryAfterInvalid}
	raOverlongK = RetryAfter{Kind: RetryAfterOverlong}
	raOversized = RetryAfter{Kind: RetryAfterOversized}
)

func retryAfterCases() []retryAfterCase {
	t0 := raT0
	max := time.Unix(math.MaxInt64, 0)
	min := time.Unix(math.MinInt64, 0)
	d128 := strings.Repeat("0", 127) + "5"
	d129 := strings.Repeat("0", 128) + "5"
	fallback := func(recv time.Time) *RetryAfterTiming { return raTiming(recv, 1) }
	return []retryAfterCase{
		// strict-retry-after: lookup across every key, case-insensitively; duplicates.
		{"field-lookup/canonical key seconds", raHdr("5"), t0, raSeconds(5), raTiming(t0, 5), false},
		{"field-lookup/lower-case key only is valid", raWith(map[string][]string{"retry-after": {"5"}}), t0, raSeconds(5), raTiming(t0, 5), false},
		{"field-lookup/upper-case key only is valid", raWith(map[string][]string{"RETRY-AFTER": {"7"}}), t0, raSeconds(7), raTiming(t0, 7), false},
		{"field-lookup/mixed-case key only is valid", http.Header{"rEtRy-AfTeR": {"3"}}, t0, raSeconds(3), raTiming(t0, 3), false},
		{"field-lookup/two values in one key are a duplicate", raHdr("5", "5"), t0, raInvalid, fallback(t0), true},
		{"field-lookup/two keys differing in case are a duplicate", raWith(map[string][]string{"Retry-After": {"5"}, "retry-after": {"5"}}), t0, raInvalid, fallback(t0), true},
		{"field-lookup/second key with no value is still a duplicate key", raWith(map[string][]string{"Retry-After": {"5"}, "RETRY-AFTER": {}}), t0, raInvalid, fallback(t0), true},
		{"field-lookup/key with an empty value list is missing", raWith(map[string][]string{"Retry-After": {}}), t0, raMissing, fallback(t0), true},
		{"field-lookup/near-miss keys do not match", raWith(map[string][]string{"Retry-Afterx": {"5"}, "Retry_After": {"5"}, "Retry-Aftr": {"5"}, "Retry\rAfter": {"5"}}), t0, raMissing, fallback(t0), true},

		// diagnosed-fallback: missing and malformed fields: diagnosed 1 s fallback in the timing only.
		{"fallback/missing among Azure headers", raHdr(), t0, raMissing, fallback(t0), true},
		{"fallback/nil header is missing", nil, t0, raMissing, fallback(t0), true},
		{"fallback/empty value is invalid", raHdr(""), t0, raInvalid, fallback(t0), true},
		{"fallback/whitespace-only value is invalid", raHdr(" \t "), t0, raInvalid, fallback(t0), true},
		{"fallback/letters are invalid", raHdr("soon"), t0, raInvalid, fallback(t0), true},

		// strict-retry-after: delay-seconds is 1*DIGIT in ASCII.
		{"delay-seconds/zero", raHdr("0"), t0, raSeconds(0), raTiming(t0, 0), false},
		{"delay-seconds/leading zeros 007", raHdr("007"), t0, raSeconds(7), raTiming(t0, 7), false},
		{"delay-seconds/OWS trimmed around 5", raHdr(" 5 "), t0, raSeconds(5), raTiming(t0, 5), false},
		{"delay-seconds/HTAB trimmed around 5", raHdr("\t5\t"), t0, raSeconds(5), raTiming(t0, 5), false},
		{"delay-seconds/plus sign invalid", raHdr("+5"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/minus sign invalid", raHdr("-5"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/decimal point invalid", raHdr("5.0"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/exponent invalid", raHdr("1e3"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/hex invalid", raHdr("0x10"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/inner space invalid", raHdr("5 0"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/trailing LF is not OWS", raHdr("5\n"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/leading VT is not OWS", raHdr("\v5"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/fullwidth digit invalid", raHdr("\uff15"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/Arabic-Indic digit invalid", raHdr("\u0665"), t0, raInvalid, fallback(t0), true},
		{"delay-seconds/ASCII digit then fullwidth digit invalid", raHdr("1\uff15"), t0, raInvalid, fallback(t0), true},

		// stop-not-shorten: the 30 s ceiling and unrepresentable delays (seconds).
		{"overlong/seconds 30 is the last valid wait", raHdr("30"), t0, raSeconds(30), raTiming(t0, 30), false},
		{"overlong/seconds 31 is overlong with real timing", raHdr("31"), t0, raOverlongK, raTiming(t0, 31), true},
		{"overlong/seconds 3600 is overlong with real timing", raHdr("3600"), t0, raOverlongK, raTiming(t0, 3600), true},
		{"overlong/max int64 seconds: not-before overflows, no timing", raHdr("9223372036854775807"), t0, raOverlongK, nil, true},
		{"overlong/digits overflowing int64: no timing", raHdr("9223372036854775808"), t0, raOverlongK, nil, true},
		{"overlong/forty nines: no timing", raHdr(strings.Repeat("9", 40)), t0, raOverlongK, nil, true},
		{"overlong/receipt near max int64: received+5 overflows", raHdr("5"), time.Unix(math.MaxInt64-3, 0), raOverlongK, nil, true},
		{"overlong/receipt at unixtime.Max-3: not-before beyond the bound, no timing", raHdr("5"), time.Unix(unixtime.Max-3, 0), raOverlongK, nil, true},
		{"overlong/receipt at unixtime.Max-5: not-before is the bound", raHdr("5"), time.Unix(unixtime.Max-5, 0), raSeconds(5), &RetryAfterTiming{unixtime.Max - 5, unixtime.Max, 5}, false},
		{"overlong/a delay of 300000000000 s lies beyond the bound: no timing", raHdr("300000000000"), t0, raOverlongK, nil, true},

		// fail-closed-oversized: oversized fields fail closed.
		{"oversized/128-byte value with leading zeros is valid", raHdr(d128), t0, raSeconds(5), raTiming(t0, 5), false},
		{"oversized/129-byte value is oversized", raHdr(d129), t0, raOversized, nil, true},
		{"oversized/raw length counts OWS", raHdr(strings.Repeat(" ", 128) + "5"), t0, raOversized, nil, true},
		{"oversized/oversized wins over duplicate values", raHdr("5", d129), t0, raOversized, nil, true},
		{"oversized/oversized in a non-canonical duplicate key wins", raWith(map[string][]string{"Retry-After": {"5"}, "retry-after": {d129}}), t0, raOversized, nil, true},
		{"oversized/oversized without receipt time", raHdr(d129), time.Time{}, raOversized, nil, true},

		// strict-retry-after: HTTP-date, three forms, strict, resolved against receipt in UTC.
		{"http-date/IMF-fixdate equal to receipt is zero", raHdr("Sun, 06 Nov 1994 08:49:37 GMT"), t0, raDate(0), raTiming(t0, 0), false},
		{"http-date/IMF-fixdate 10 s ahead", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), t0, raDate(10), raTiming(t0, 10), false},
		{"http-date/stop-not-shorten IMF-fixdate 30 s ahead is the last valid wait", raHdr("Sun, 06 Nov 1994 08:50:07 GMT"), t0, raDate(30), raTiming(t0, 30), false},
		{"http-date/stop-not-shorten IMF-fixdate 31 s ahead is overlong with real timing", raHdr("Sun, 06 Nov 1994 08:50:08 GMT"), t0, raOverlongK, raTiming(t0, 31), true},
		{"http-date/IMF-fixdate one hour past is zero", raHdr("Sun, 06 Nov 1994 07:49:37 GMT"), t0, raDate(0), raTiming(t0, 0), false},
		{"http-date/IMF-fixdate 1970 epoch is past", raHdr("Thu, 01 Jan 1970 00:00:00 GMT"), t0, raDate(0), raTiming(t0, 0), false},
		{"http-date/IMF-fixdate with OWS", raHdr("\t Sun, 06 Nov 1994 08:49:47 GMT "), t0, raDate(10), raTiming(t0, 10), false},
		{"http-date/receipt in another zone resolves in UTC", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), t0.In(time.FixedZone("UTC+5", 5*3600)), raDate(10), raTiming(t0, 10), false},
		{"http-date/receipt fraction of a second is floored", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), t0.Add(900 * time.Millisecond), raDate(10), raTiming(t0, 10), false},
		{"http-date/RFC 850 10 s ahead", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), t0, raDate(10), raTiming(t0, 10), false},
		{"http-date/asctime space-padded day 10 s ahead", raHdr("Sun Nov  6 08:49:47 1994"), t0, raDate(10), raTiming(t0, 10), false},
		{"http-date/asctime zero-padded day (2DIGIT) 10 s ahead", raHdr("Sun Nov 06 08:49:47 1994"), t0, raDate(10), raTiming(t0, 10), false},
		{"http-date/stop-not-shorten asctime two-digit day 10 days ahead is overlong", raHdr("Wed Nov 16 08:49:37 1994"), t0, raOverlongK, raTiming(t0, 864000), true},
		{"http-date/asctime past", raHdr("Fri Dec 31 23:59:59 1993"), t0, raDate(0), raTiming(t0, 0), false},
		{"http-date/zone UTC invalid", raHdr("Sun, 06 Nov 1994 08:49:47 UTC"), t0, raInvalid, fallback(t0), true},
		{"http-date/zone EST invalid", raHdr("Sun, 06 Nov 1994 08:49:47 EST"), t0, raInvalid, fallback(t0), true},
		{"http-date/zone +0000 invalid", raHdr("Sun, 06 Nov 1994 08:49:47 +0000"), t0, raInvalid, fallback(t0), true},
		{"http-date/zone lower-case gmt invalid", raHdr("Sun, 06 Nov 1994 08:49:47 gmt"), t0, raInvalid, fallback(t0), true},
		{"http-date/RFC 850 zone UTC invalid", raHdr("Sunday, 06-Nov-94 08:49:47 UTC"), t0, raInvalid, fallback(t0), true},
		{"http-date/asctime with a zone invalid", raHdr("Sun Nov  6 08:49:47 1994 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/weekday mismatch invalid", raHdr("Mon, 06 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/asctime weekday mismatch invalid", raHdr("Mon Nov  6 08:49:47 1994"), t0, raInvalid, fallback(t0), true},
		{"http-date/RFC 850 weekday mismatch invalid", raHdr("Monday, 06-Nov-94 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/day 31 November invalid", raHdr("Thu, 31 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/day 00 invalid", raHdr("Sun, 00 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/29 February 1900 invalid", raHdr("Thu, 29 Feb 1900 00:00:00 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/29 February 2000 valid and past", raHdr("Tue, 29 Feb 2000 00:00:00 GMT"), raT2026, raDate(0), raTiming(raT2026, 0), false},
		{"http-date/unknown month invalid", raHdr("Sun, 06 Foo 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/lower-case month invalid", raHdr("Sun, 06 nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/upper-case day name invalid", raHdr("SUN, 06 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/long day name in IMF-fixdate invalid", raHdr("Sunday, 06 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/short day name in RFC 850 invalid", raHdr("Sun, 06-Nov-94 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/space-padded day in IMF-fixdate invalid", raHdr("Sun,  6 Nov 1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/double inner space invalid", raHdr("Sun, 06 Nov  1994 08:49:47 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/hour 24 invalid", raHdr("Sun, 06 Nov 1994 24:00:00 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/minute 60 invalid", raHdr("Sun, 06 Nov 1994 08:60:00 GMT"), t0, raInvalid, fallback(t0), true},
		{"http-date/leap second 23:59:60 is the next 00:00:00", raHdr("Sat, 31 Dec 2016 23:59:60 GMT"), raTLeap, raDate(10), raTiming(raTLeap, 10), false},
		{"http-date/second 60 outside 23:59 invalid", raHdr("Sat, 31 Dec 2016 23:58:60 GMT"), raTLeap, raInvalid, fallback(raTLeap), true},
		{"http-date/RFC 850 pivot: 70 seen from 2026 is 2070", raHdr("Wednesday, 01-Jan-70 00:00:00 GMT"), raT2026, raOverlongK, raTiming(raT2026, 3155760000-raT2026.Unix()), true},
		{"http-date/RFC 850 pivot: 1970 weekday for 70 seen from 2026 mismatches", raHdr("Thursday, 01-Jan-70 00:00:00 GMT"), raT2026, raInvalid, fallback(raT2026), true},
		{"http-date/RFC 850 pivot: 77 seen from 2026 is 1977, past", raHdr("Saturday, 01-Jan-77 00:00:00 GMT"), raT2026, raDate(0), raTiming(raT2026, 0), false},
		{"http-date/RFC 850 pivot: exactly 50 years ahead stays in the future", raHdr("Saturday, 14-Mar-76 12:00:00 GMT"), raT2026, raOverlongK, raTiming(raT2026, 3351369600+43200-raT2026.Unix()), true},
		{"http-date/RFC 850 pivot: 50 years and 1 s ahead is the past century", raHdr("Sunday, 14-Mar-76 12:00:01 GMT"), raT2026, raDate(0), raTiming(raT2026, 0), false},
		{"http-date/RFC 850 same year 10 s ahead", raHdr("Saturday, 14-Mar-26 12:00:10 GMT"), raT2026, raDate(10), raTiming(raT2026, 10), false},
		{"http-date/stop-not-shorten receipt at min int64: date delay overflows, no timing", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), min, raOverlongK, nil, true},
		{"http-date/receipt at unixtime.Max: date is past", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), time.Unix(unixtime.Max, 0), raDate(0), &RetryAfterTiming{unixtime.Max, unixtime.Max, 0}, false},
		{"http-date/receipt at max int64: beyond the bound, no timing", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), max, raOverlongK, nil, true},
		{"http-date/stop-not-shorten RFC 850 year unresolvable for a receipt beyond 9999", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), max, raOverlongK, nil, true},

		// typed-retry-after: timing only with a known receipt time.
		{"typed/zero receipt: seconds keep kind and value, no timing", raHdr("5"), time.Time{}, raSeconds(5), nil, false},
		{"typed/zero receipt: overlong seconds, no timing", raHdr("45"), time.Time{}, raOverlongK, nil, true},
		{"typed/zero receipt: missing, no timing", raHdr(), time.Time{}, raMissing, nil, true},
		{"typed/zero receipt: invalid, no timing", raHdr("soon"), time.Time{}, raInvalid, nil, true},
		{"typed/zero receipt: duplicate, no timing", raHdr("5", "6"), time.Time{}, raInvalid, nil, true},
		{"typed/zero receipt: IMF-fixdate is unresolved invalid", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), time.Time{}, raInvalid, nil, true},
		{"typed/zero receipt: RFC 850 is unresolved invalid", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), time.Time{}, raInvalid, nil, true},
		{"typed/zero receipt: asctime is unresolved invalid", raHdr("Sun Nov  6 08:49:47 1994"), time.Time{}, raInvalid, nil, true},
		{"typed/Unix epoch is a known receipt time", raHdr("5"), time.Unix(0, 0), raSeconds(5), &RetryAfterTiming{0, 5, 5}, false},
		{"typed/receipt at max int64: missing has no representable fallback", raHdr(), max, raMissing, nil, true},
		{"typed/receipt at unixtime.Max-1: fallback not-before is the bound", raHdr("x"), time.Unix(unixtime.Max-1, 0), raInvalid, &RetryAfterTiming{unixtime.Max - 1, unixtime.Max, 1}, true},
		{"typed/receipt at unixtime.Max: no representable fallback", raHdr("x"), time.Unix(unixtime.Max, 0), raInvalid, nil, true},
	}
}

func TestParseRetryAfter(t *testing.T) {
	cases := retryAfterCases()
	checkRetryAfterTableCoverage(t, cases)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, timing, diag := ParseRetryAfter(tc.h, tc.recv)
			if got != tc.want {
				t.Errorf("RetryAfter = %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.wantTiming == nil && timing != nil:
				t.Errorf("timing = %+v, want nil", *timing)
			case tc.wantTiming != nil && timing == nil:
				t.Errorf("timing = nil, want %+v", *tc.wantTiming)
			case tc.wantTiming != nil && *timing != *tc.wantTiming:
				t.Errorf("timing = %+v, want %+v", *timing, *tc.wantTiming)
			}
			if (diag != "") != tc.wantDiag {
				t.Errorf("diagnostic = %q, want non-empty: %v", diag, tc.wantDiag)
			}
			checkRetryAfterInvariants(t, tc.h, tc.recv, got, timing, diag)
			checkRetryAfterAtAgrees(t, tc.h, tc.recv, got, timing, diag)
			var scratch RetryAfterTiming
			if n := testing.AllocsPerRun(10, func() { parseRetryAfterAt(tc.h, tc.recv, &scratch) }); n != 0 {
				t.Errorf("parseRetryAfterAt: %v allocations, want 0", n)
			}
		})
	}
}

// checkRetryAfterTableCoverage asserts that the table exercises every kind,
// with and without timing where the kind can have one, under every rule
// strict-retry-after-typed-retry-after: a row dropped or rewritten by mistake shows up here.
func checkRetryAfterTableCoverage(t *testing.T, cases []retryAfterCase) {
	t.Helper()
	type cell struct {
		kind   RetryAfterKind
		timing bool
	}
	seen := map[cell]int{}
	rules := map[string]int{}
	for _, tc := range cases {
		seen[cell{tc.want.Kind, tc.wantTiming != nil}]++
		rule, _, _ := strings.Cut(tc.name, "/")
		rules[rule]++
	}
	for _, c := range []cell{
		{RetryAfterSeconds, true}, {RetryAfterSeconds, false},
		{RetryAfterDate, true},
		{RetryAfterMissing, true}, {RetryAfterMissing, false},
		{RetryAfterInvalid, true}, {RetryAfterInvalid, false},
		{RetryAfterOverlong, true}, {RetryAfterOverlong, false},
		{RetryAfterOversized, false},
	} {
		if seen[c] == 0 {
			t.Errorf("no row of kind %s with timing %v", c.kind, c.timing)
		}
	}
	for _, r := range []string{"field-lookup", "delay-seconds", "http-date", "fallback", "oversized", "overlong", "typed"} {
		if rules[r] < 3 {
			t.Errorf("%d rows for %s, want at least 3", rules[r], r)
		}
	}
}

// checkRetryAfterAtAgrees asserts that the transport's parseRetryAfterAt
// gives what ParseRetryAfter gave, with the constant diagnostic where the
// public one spells out a count or a delay.
func checkRetryAfterAtAgrees(t *testing.T, h http.Header, recv time.Time, want RetryAfter, wantTiming *RetryAfterTiming, wantDiag string) {
	t.Helper()
	timing := RetryAfterTiming{ReceivedAtUTC: -1, NotBeforeUTC: -1, ServerDelaySeconds: -1}
	got, hasTiming, diag := parseRetryAfterAt(h, recv, &timing)
	if got != want || hasTiming != (wantTiming != nil) || (hasTiming && timing != *wantTiming) {
		t.Errorf("parseRetryAfterAt = %+v, %v, %+v; ParseRetryAfter %+v, %+v", got, hasTiming, timing, want, wantTiming)
	}
	if diag != raTransportDiag(wantDiag) {
		t.Errorf("parseRetryAfterAt diagnostic %q, want %q (public %q)", diag, raTransportDiag(wantDiag), wantDiag)
	}
	checkWaitFieldsAgree(t, h, recv)
}

// checkWaitFieldsAgree checks that the transport's one-pass read of a 429's
// three fields gives what parseRetryAfterAt and parseRetryAfterMs give
// apart, without allocating.
func checkWaitFieldsAgree(t *testing.T, h http.Header, recv time.Time) {
	t.Helper()
	var wantTiming, gotTiming RetryAfterTiming
	ra, hasTiming, diag := parseRetryAfterAt(h, recv, &wantTiming)
	ms, msKind, msDiag := parseRetryAfterMs(h)
	want := waitFields{ra: ra, hasTiming: hasTiming, diag: diag, ms: ms, msKind: msKind, msDiag: msDiag}
	if got := parseWaitFieldsAt(h, recv, &gotTiming); got != want || gotTiming != wantTiming {
		t.Errorf("parseWaitFieldsAt = %+v, %+v; apart %+v, %+v", got, gotTiming, want, wantTiming)
	}
	if n := testing.AllocsPerRun(5, func() { parseWaitFieldsAt(h, recv, &gotTiming) }); n != 0 {
		t.Errorf("parseWaitFieldsAt allocates %v times", n)
	}
}

// raTransportDiag returns the constant diagnostic the transport gets for a
// public diagnostic: the same but for counts and delays, which it does not
// spell out.
func raTransportDiag(public string) string {
	for _, r := range []struct{ pre, post, constant string }{
		{"retry-after: delay ", " s above 30 s ceiling; sequence stops", raDiagOverlong},
		{"retry-after: ", " keys differing in case", raDiagDupKeys},
		{"retry-after: ", " values", raDiagDupValues},
	} {
		rest, ok := strings.CutPrefix(public, r.pre)
		if !ok {
			continue
		}
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		if digits == 0 || !strings.HasPrefix(rest[digits:], r.post) {
			continue
		}
		if r.constant == raDiagOverlong {
			return raDiagOverlong
		}
		return r.constant + rest[digits+len(r.post):]
	}
	return public
}

// TestParseRetryAfterAtDiagnostics pins the transport's constant diagnostics
// where they differ from the public ones, and the numbers in the constant
// texts against the constants they name.
func TestParseRetryAfterAtDiagnostics(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		recv time.Time
		want string
	}{
		{"field-lookup/three values", raHdr("5", "6", "7"), raT0, "retry-after: several values; 1 s fallback"},
		{"field-lookup/two keys", raWith(map[string][]string{"Retry-After": {"5"}, "retry-after": {"5"}}), raT0, "retry-after: several keys differing in case; 1 s fallback"},
		{"field-lookup/two keys without receipt", raWith(map[string][]string{"Retry-After": {"5"}, "RETRY-AFTER": {"5"}}), time.Time{}, "retry-after: several keys differing in case; unresolved, no receipt time"},
		{"field-lookup/two values, receipt too late", raHdr("5", "5"), time.Unix(math.MaxInt64, 0), "retry-after: several values; 1 s fallback; receipt time too late to represent"},
		{"overlong/overlong", raHdr("45"), raT0, "retry-after: delay above 30 s ceiling; sequence stops"},
		{"overlong/overlong date", raHdr("Wed Nov 16 08:49:37 1994"), raT0, "retry-after: delay above 30 s ceiling; sequence stops"},
		{"overlong/overlong without receipt", raHdr("45"), time.Time{}, "retry-after: delay above 30 s ceiling; sequence stops"},
		{"oversized/oversized", raHdr(strings.Repeat("9", 129)), raT0, "retry-after: value longer than 128 bytes; fail closed, no wait"},
		{"http-date/date reason", raHdr("Sun, 06 Nov 1994 08:49:47 XYZ"), raT0, "retry-after: http-date zone not GMT; 1 s fallback"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var timing RetryAfterTiming
			if _, _, diag := parseRetryAfterAt(tc.h, tc.recv, &timing); diag != tc.want {
				t.Errorf("diagnostic = %q, want %q", diag, tc.want)
			}
		})
	}
	if want := "above " + strconv.FormatInt(raMaxWaitSeconds, 10) + " s ceiling"; !strings.Contains(raDiagOverlong, want) || !strings.Contains(raDiagOverlongSf, want) {
		t.Errorf("overlong diagnostics %q, %q do not say %q", raDiagOverlong, raDiagOverlongSf, want)
	}
	if want := "longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"; !strings.Contains(raDiagOversized, want) {
		t.Errorf("oversized diagnostic %q does not say %q", raDiagOversized, want)
	}
}

// TestParseRetryAfterDiagnostics pins the wording of a few diagnostics and
// checks that none repeats the attacker-controlled value.
func TestParseRetryAfterDiagnostics(t *testing.T) {
	secret := "sig=SECRETTOKEN"
	cases := []struct {
		name string
		h    http.Header
		recv time.Time
		want string
	}{
		{"fallback/missing", raHdr(), raT0, "retry-after: missing; 1 s fallback"},
		{"fallback/missing without receipt", raHdr(), time.Time{}, "retry-after: missing; unresolved, no receipt time"},
		{"field-lookup/two values", raHdr("5", secret), raT0, "retry-after: 2 values; 1 s fallback"},
		{"field-lookup/two keys", raWith(map[string][]string{"Retry-After": {secret}, "retry-after": {"5"}}), raT0, "retry-after: 2 keys differing in case; 1 s fallback"},
		{"field-lookup/three keys without receipt", raWith(map[string][]string{"Retry-After": {"5"}, "retry-after": {"5"}, "RETRY-AFTER": {"5"}}), time.Time{}, "retry-after: 3 keys differing in case; unresolved, no receipt time"},
		{"field-lookup/two values, receipt too late", raHdr("5", "5"), time.Unix(math.MaxInt64, 0), "retry-after: 2 values; 1 s fallback; receipt time too late to represent"},
		{"fallback/missing, receipt too late", raHdr(), time.Unix(math.MaxInt64, 0), "retry-after: missing; 1 s fallback; receipt time too late to represent"},
		{"overlong/overlong without receipt", raHdr("120"), time.Time{}, "retry-after: delay 120 s above 30 s ceiling; sequence stops"},
		{"delay-seconds/not digits", raHdr("5" + secret), raT0, "retry-after: delay-seconds is not 1*DIGIT; 1 s fallback"},
		{"fallback/neither", raHdr("<" + secret + ">"), raT0, "retry-after: neither delay-seconds nor http-date; 1 s fallback"},
		{"http-date/layout", raHdr(secret), raT0, "retry-after: http-date layout not imf-fixdate, rfc850 or asctime; 1 s fallback"},
		{"http-date/zone", raHdr("Sun, 06 Nov 1994 08:49:47 XYZ"), raT0, "retry-after: http-date zone not GMT; 1 s fallback"},
		{"http-date/weekday", raHdr("Mon, 06 Nov 1994 08:49:47 GMT"), raT0, "retry-after: http-date weekday does not match the date; 1 s fallback"},
		{"oversized/oversized", raHdr(strings.Repeat(secret, 20)), raT0, "retry-after: value longer than 128 bytes; fail closed, no wait"},
		{"overlong/overlong", raHdr("0045"), raT0, "retry-after: delay 45 s above 30 s ceiling; sequence stops"},
		{"overlong/unrepresentable", raHdr(strings.Repeat("9", 30)), raT0, "retry-after: delay not representable in unix seconds; unresolved"},
		{"typed/date without receipt", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), time.Time{}, "retry-after: http-date without receipt time; unresolved"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, diag := ParseRetryAfter(tc.h, tc.recv)
			if diag != tc.want {
				t.Errorf("diagnostic = %q, want %q", diag, tc.want)
			}
			if strings.Contains(diag, "SECRET") || strings.Contains(diag, "XYZ") {
				t.Errorf("diagnostic %q echoes the header value", diag)
			}
		})
	}
}

// TestParseRetryAfterDateRoundTrip formats instants across years 1601-9999
// in the three HTTP-date forms with the standard library and checks that each
// resolves to the exact delay (strict-retry-after, stop-not-shorten).
func TestParseRetryAfterDateRoundTrip(t *testing.T) {
	start := time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	end := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	const step = 11_111_111_111 / 1000 * 7 // ~2.5 years between samples; odd to vary the time of day
	n := 0
	for u := start; u <= end; u += step + int64(n%86400) {
		n++
		at := time.Unix(u, 0).UTC()
		forms := []string{
			at.Format(http.TimeFormat),
			at.Format("Monday, 02-Jan-06 15:04:05 GMT"),
			at.Format(time.ANSIC),
		}
		for _, delay := range []int64{0, 1, 30, 31, 86400} {
			recv := time.Unix(u-delay, 0)
			for _, v := range forms {
				got, timing, diag := ParseRetryAfter(raHdr(v), recv)
				want := raDate(delay)
				if delay > 30 {
					want = raOverlongK
				}
				if got != want || timing == nil || *timing != *raTiming(recv, delay) || (diag == "") != (delay <= 30) {
					t.Fatalf("%q received %d s before: got %+v %+v %q, want %+v delay %d", v, delay, got, timing, diag, want, delay)
				}
			}
		}
	}
	if n < 1000 {
		t.Fatalf("only %d samples", n)
	}
}

// TestParseRetryAfterAllocs checks that the clean paths allocate nothing but
// the returned timing.
func TestParseRetryAfterAllocs(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		recv time.Time
		max  float64
	}{
		{"seconds", raHdr("5"), raT0, 1},
		{"seconds without receipt", raHdr("5"), time.Time{}, 0},
		{"imf-fixdate", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), raT0, 1},
		{"rfc850", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), raT0, 1},
		{"asctime", raHdr("Sun Nov  6 08:49:47 1994"), raT0, 1},
		{"missing", raHdr(), raT0, 1},
		{"missing without receipt", raHdr(), time.Time{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() { ParseRetryAfter(tc.h, tc.recv) })
			if got > tc.max {
				t.Errorf("allocs = %v, want at most %v", got, tc.max)
			}
		})
	}
}

// checkRetryAfterInvariants asserts what must hold for every result; the
// fuzz target and the table share it.
func checkRetryAfterInvariants(t *testing.T, h http.Header, recv time.Time, got RetryAfter, timing *RetryAfterTiming, diag string) {
	t.Helper()
	switch got.Kind {
	case RetryAfterSeconds, RetryAfterDate:
		if got.Value < 0 || got.Value > 30 {
			t.Errorf("%s value %d outside 0..30", got.Kind, got.Value)
		}
		if diag != "" {
			t.Errorf("%s with diagnostic %q", got.Kind, diag)
		}
		if timing != nil && timing.ServerDelaySeconds != got.Value {
			t.Errorf("%s value %d but timing delay %d", got.Kind, got.Value, timing.ServerDelaySeconds)
		}
		if got.Kind == RetryAfterDate && timing == nil {
			t.Errorf("date without timing")
		}
	case RetryAfterMissing, RetryAfterInvalid, RetryAfterOverlong, RetryAfterOversized:
		if got.Value != 0 {
			t.Errorf("%s with value %d, want the 0 sentinel", got.Kind, got.Value)
		}
		if diag == "" {
			t.Errorf("%s without diagnostic", got.Kind)
		}
	default:
		t.Errorf("unknown kind %q", got.Kind)
	}
	if timing != nil {
		if recv.IsZero() {
			t.Errorf("timing %+v without receipt time", *timing)
		}
		if timing.ReceivedAtUTC != recv.Unix() {
			t.Errorf("ReceivedAtUTC %d, want %d", timing.ReceivedAtUTC, recv.Unix())
		}
		if timing.ServerDelaySeconds < 0 || timing.NotBeforeUTC-timing.ServerDelaySeconds != timing.ReceivedAtUTC || timing.NotBeforeUTC < timing.ReceivedAtUTC {
			t.Errorf("inconsistent timing %+v", *timing)
		}
	}
	switch got.Kind {
	case RetryAfterOversized:
		if timing != nil {
			t.Errorf("oversized with timing %+v", *timing)
		}
	case RetryAfterMissing, RetryAfterInvalid:
		if timing != nil && timing.ServerDelaySeconds != fallbackDelaySeconds {
			t.Errorf("%s fallback delay %d, want 1", got.Kind, timing.ServerDelaySeconds)
		}
		if timing == nil && !recv.IsZero() && recv.Unix() < unixtime.Max {
			t.Errorf("%s with known receipt time but no fallback timing", got.Kind)
		}
	case RetryAfterOverlong:
		if timing != nil && timing.ServerDelaySeconds <= 30 {
			t.Errorf("overlong with delay %d", timing.ServerDelaySeconds)
		}
	case RetryAfterSeconds:
		if timing == nil && !recv.IsZero() {
			t.Errorf("seconds with known receipt time but no timing")
		}
	}
	if !raDiagAllowed(diag) {
		t.Errorf("diagnostic %q is not one of the fixed forms", diag)
	}
}

// raDiagAllowed reports whether diag is one of the fixed diagnostic forms,
// with every run of digits read as N. A diagnostic that echoed the header
// value would not be.
func raDiagAllowed(diag string) bool {
	if diag == "" {
		return true
	}
	return raDiagForms()[raNormalizeDigits(diag)]
}

var raDiagForms = sync.OnceValue(func() map[string]bool {
	set := map[string]bool{}
	add := func(s string) { set[raNormalizeDigits(s)] = true }
	reasons := []string{
		"retry-after: 2 keys differing in case",
		"retry-after: 2 values",
		raDiagMissing, raDiagEmpty, raDiagNeither, raDiagNotDigits,
	}
	for _, e := range raDateErrors {
		reasons = append(reasons, "retry-after: "+e.err.Error())
	}
	for _, r := range reasons {
		add(r + raDiagFallback)
		add(r + raDiagFallback + "; receipt time too late to represent")
		add(r + raDiagNoReceipt)
	}
	add("retry-after: value longer than 128 bytes; fail closed, no wait")
	add(raDiagNoTiming)
	add(raDiagUnrepr)
	add(raDiagYearUnres)
	add(raDiagOverlongPf + "31" + raDiagOverlongSf)
	return set
})

func raNormalizeDigits(s string) string {
	var b strings.Builder
	inDigits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if '0' <= c && c <= '9' {
			if !inDigits {
				b.WriteByte('N')
			}
			inDigits = true
			continue
		}
		inDigits = false
		b.WriteByte(c)
	}
	return b.String()
}
