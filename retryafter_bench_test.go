package readrecovery

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// BenchmarkParseRetryAfter parses a Retry-After field among the headers of a
// typical Azure 429 response (raHdr: eight headers plus Retry-After), with a
// known receipt time. The one allocation of the timed cases is the returned
// *RetryAfterTiming; "seconds-no-receipt" shows the parse itself without it.
func BenchmarkParseRetryAfter(b *testing.B) {
	recv := raT0
	cases := []struct {
		name string
		h    http.Header
		recv time.Time
	}{
		{"seconds", raHdr("5"), recv},
		{"imf-fixdate", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), recv},
		{"rfc850", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), recv},
		{"asctime", raHdr("Sun Nov  6 08:49:47 1994"), recv},
		{"missing", raHdr(), recv},
		{"seconds-no-receipt", raHdr("5"), time.Time{}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ra, _, _ := ParseRetryAfter(bc.h, bc.recv)
				if ra.Kind == "" {
					b.Fatal("no kind")
				}
			}
		})
	}
}

// BenchmarkBaselineHTTPParseTime is net/http's own HTTP-date parser on the
// IMF-fixdate value alone (no header lookup).
func BenchmarkBaselineHTTPParseTime(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := http.ParseTime("Sun, 06 Nov 1994 08:49:47 GMT"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineAtoi is strconv.Atoi on a delay-seconds value alone.
func BenchmarkBaselineAtoi(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if n, err := strconv.Atoi("5"); err != nil || n != 5 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkParseRetryAfterAt is the transport's own path, parseRetryAfterAt,
// on the same header maps as BenchmarkParseRetryAfter: no allocation at all.
func BenchmarkParseRetryAfterAt(b *testing.B) {
	cases := []struct {
		name string
		h    http.Header
		recv time.Time
	}{
		{"seconds", raHdr("5"), raT0},
		{"imf-fixdate", raHdr("Sun, 06 Nov 1994 08:49:47 GMT"), raT0},
		{"rfc850", raHdr("Sunday, 06-Nov-94 08:49:47 GMT"), raT0},
		{"asctime", raHdr("Sun Nov  6 08:49:47 1994"), raT0},
		{"missing", raHdr(), raT0},
		{"overlong", raHdr("45"), raT0},
		{"duplicate", raHdr("5", "6"), raT0},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var timing RetryAfterTiming
			for b.Loop() {
				ra, _, _ := parseRetryAfterAt(bc.h, bc.recv, &timing)
				if ra.Kind == "" {
					b.Fatal("no kind")
				}
			}
		})
	}
}

// BenchmarkParseWaitFieldsAt is what the transport runs on a 429: the
// Retry-After field and Azure's two millisecond fields, read in one pass
// over the same header maps. "retry-after-ms" adds a millisecond field.
func BenchmarkParseWaitFieldsAt(b *testing.B) {
	withMs := raHdr("5")
	withMs.Set("Retry-After-Ms", "2500")
	cases := []struct {
		name string
		h    http.Header
	}{
		{"seconds", raHdr("5")},
		{"imf-fixdate", raHdr("Sun, 06 Nov 1994 08:49:47 GMT")},
		{"missing", raHdr()},
		{"retry-after-ms", withMs},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var timing RetryAfterTiming
			for b.Loop() {
				if w := parseWaitFieldsAt(bc.h, raT0, &timing); w.ra.Kind == "" {
					b.Fatal("no kind")
				}
			}
		})
	}
}

// BenchmarkParseRetryAfterMs reads Azure's millisecond fields from the same
// kind of header map: absent (the usual case), and one valid field.
func BenchmarkParseRetryAfterMs(b *testing.B) {
	cases := []struct {
		name string
		h    http.Header
	}{
		{"missing", raHdr("5")},
		{"retry-after-ms", raMsHdr(map[string][]string{"Retry-After-Ms": {"2500"}})},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, kind, _ := parseRetryAfterMs(bc.h); kind == "" {
					b.Fatal("no kind")
				}
			}
		})
	}
}

// BenchmarkBaselineHeaderRange is the floor of an exact strict-retry-after lookup: ranging
// over the keys of the same header map, comparing lengths only. Go's map
// iteration is most of parseRetryAfterAt's cost.
func BenchmarkBaselineHeaderRange(b *testing.B) {
	h := raHdr("5")
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for k := range h {
			if len(k) == len(raKey) {
				n++
			}
		}
		if n != 1 {
			b.Fatal(n)
		}
	}
}

// BenchmarkBaselineHeaderLookup is a direct lookup of the canonical key in
// the same header map: what a lookup that ignored hand-set case variants
// would cost.
func BenchmarkBaselineHeaderLookup(b *testing.B) {
	h := raHdr("5")
	b.ReportAllocs()
	for b.Loop() {
		if len(h[raKey]) != 1 {
			b.Fatal("no field")
		}
	}
}
