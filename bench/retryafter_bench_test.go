package bench

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// raReceived is the receipt time of the parsed 429s; the dates below are
// 5 s later.
var raReceived = time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)

// azure429 returns the headers of a typical Azure 429 (eight fields) with
// the given Retry-After values.
func azure429(values ...string) http.Header {
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

// raForm is one Retry-After form, with the kind readrecovery must find and
// the baseline a hand-written client would use.
type raForm struct {
	name   string
	values []string
	kind   readrecovery.RetryAfterKind
	date   bool // baseline: http.ParseTime, else strconv.Atoi
}

var raForms = []raForm{
	{"seconds", []string{"5"}, readrecovery.RetryAfterSeconds, false},
	{"zero", []string{"0"}, readrecovery.RetryAfterSeconds, false},
	{"imf-fixdate", []string{"Sun, 06 Nov 1994 08:49:42 GMT"}, readrecovery.RetryAfterDate, true},
	{"rfc850", []string{"Sunday, 06-Nov-94 08:49:42 GMT"}, readrecovery.RetryAfterDate, true},
	{"asctime", []string{"Sun Nov  6 08:49:42 1994"}, readrecovery.RetryAfterDate, true},
	{"missing", nil, readrecovery.RetryAfterMissing, false},
	{"invalid", []string{"1.5"}, readrecovery.RetryAfterInvalid, false},
	{"duplicate", []string{"1", "2"}, readrecovery.RetryAfterInvalid, false},
	{"overlong", []string{"3600"}, readrecovery.RetryAfterOverlong, false},
	{"oversized", []string{strings.Repeat("0", 199) + "1"}, readrecovery.RetryAfterOversized, false},
}

// BenchmarkRetryAfter parses each Retry-After form:
//
//   - parser=readrecovery: readrecovery.ParseRetryAfter over the whole
//     header map (its lookup is case-insensitive across every key, R17),
//     with a receipt time, so the timing is built too;
//   - parser=value: the baseline on the value alone, strconv.Atoi for
//     delay-seconds forms and http.ParseTime for HTTP-dates (which knows
//     the same three date forms);
//   - parser=get+value: the same after http.Header.Get, what a hand-written
//     client does.
//
// The baselines do less (no duplicate, size or overlong checks, no timing):
// they are floors, not equivalents.
func BenchmarkRetryAfter(b *testing.B) {
	for _, f := range raForms {
		h := azure429(f.values...)
		if ra, _, _ := readrecovery.ParseRetryAfter(h, raReceived); ra.Kind != f.kind {
			b.Fatalf("%s: kind %q, want %q", f.name, ra.Kind, f.kind)
		}
		b.Run("form="+f.name+"/parser=readrecovery", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ra, _, _ := readrecovery.ParseRetryAfter(h, raReceived)
				if ra.Kind != f.kind {
					b.Fatal(ra.Kind)
				}
			}
		})
		v := ""
		if len(f.values) > 0 {
			v = f.values[0]
		}
		value := func(s string) bool {
			if f.date {
				_, err := http.ParseTime(s)
				return err == nil
			}
			_, err := strconv.Atoi(s)
			return err == nil
		}
		b.Run("form="+f.name+"/parser=value", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = value(v)
			}
		})
		b.Run("form="+f.name+"/parser=get+value", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = value(h.Get("Retry-After"))
			}
		})
	}
}

// sink keeps the baselines' results alive.
var sink bool
