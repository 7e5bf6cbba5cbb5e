package readrecovery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The three wait fields of a 429 in one of the shapes a server sends.
type fieldShape uint8

const (
	shapeAbsent fieldShape = iota
	shapeValid
	shapeMalformed
	shapeEmpty
	shapeDupValues
	shapeDupKeys
	shapeCount
)

var malformedValues = []string{"-1", "1.5", "abc", "1 2", "+3", "\u0663", "0x10", "2s", "\t\v1"}

// mixedCase returns name in a random ASCII case.
func mixedCase(rng *rand.Rand, name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && rng.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// waitCase is one random header and the wait it must produce.
type waitCase struct {
	header http.Header
	want   time.Duration
	desc   string
}

// randomWaitCase builds the three fields, each in a random shape with a
// random key case, and the wait the policy owes: the Retry-After delay (1 s
// fallback when it is not valid) or the largest valid millisecond field,
// whichever is longer (docs/policy.md: millisecond-floor, each field judged
// on its own).
func randomWaitCase(rng *rand.Rand) waitCase {
	h := http.Header{}
	var desc []string
	want := time.Duration(fallbackDelaySeconds) * time.Second
	for i, name := range []string{"retry-after", "retry-after-ms", "x-ms-retry-after-ms"} {
		shape := fieldShape(rng.IntN(int(shapeCount)))
		key := mixedCase(rng, name)
		var v int
		if i == 0 {
			v = rng.IntN(6) // seconds
		} else {
			v = rng.IntN(6001) // milliseconds
		}
		val := strconv.Itoa(v)
		if rng.IntN(4) == 0 {
			val = strings.Repeat("0", rng.IntN(3)) + val + strings.Repeat(" ", rng.IntN(2)) // leading zeros, OWS
		}
		switch shape {
		case shapeValid:
			h[key] = []string{val}
			d := time.Duration(v) * time.Second
			if i > 0 {
				d = time.Duration(v) * time.Millisecond
			}
			if i == 0 {
				want = d // Retry-After replaces the fallback
			} else {
				want = max(want, d)
			}
		case shapeMalformed:
			h[key] = []string{malformedValues[rng.IntN(len(malformedValues))]}
		case shapeEmpty:
			h[key] = []string{""}
		case shapeDupValues:
			h[key] = []string{val, val}
		case shapeDupKeys:
			h[key] = []string{val}
			h[strings.ToUpper(name)] = []string{val} // another key in another case
			if key == strings.ToUpper(name) {
				h[name] = []string{val}
			}
		}
		desc = append(desc, fmt.Sprintf("%s=%d", name, shape))
	}
	// With a valid Retry-After the wait is at least it; a valid floor
	// lengthens it. Without one, the 1 s fallback holds, lengthened by a
	// valid floor.
	return waitCase{header: h, want: want, desc: strings.Join(desc, " ")}
}

// millisecond-floor: 3,000 random combinations of the three fields, sent
// through the transport: the re-send comes exactly at the largest valid
// delay or floor (the fallback when none is valid), never before.
func TestWaitFieldsRandomized(t *testing.T) {
	const cases = 3000
	rng := rand.New(rand.NewPCG(19, 65))
	synctest.Test(t, func(t *testing.T) {
		var wc waitCase
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if req.Header.Get("X-Try") == "1" {
				r := reply(429)(req)
				r.Header = wc.header
				return r, nil
			}
			return reply(200)(req), nil
		})
		tr := New(srv)
		for i := range cases {
			wc = randomWaitCase(rng)
			b := NewBudget("s")
			req := get(t, WithBudget(context.Background(), b), base+"/x")
			req.Header.Set("X-Try", "1")
			start := time.Now()
			first := len(srv.Hits())
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("case %d (%s): %v", i, wc.desc, err)
			}
			drain(resp)
			hits := srv.Hits()[first:]
			if len(hits) != 2 {
				t.Fatalf("case %d (%s): %d requests, report %v", i, wc.desc, len(hits), b.Report())
			}
			if got := hits[1].At.Sub(start); got != wc.want {
				t.Fatalf("case %d (%s, %v): re-sent after %v, want %v", i, wc.desc, wc.header, got, wc.want)
			}
		}
	})
}

// FuzzWaitFields judges any three field values as the transport does: the
// delay is never shorter than any valid field asks, and a field that stops
// (oversized, overlong) stops.
func FuzzWaitFields(f *testing.F) {
	f.Add("1", "2500", "-1")
	f.Add("soon", "", "1800")
	f.Add("", "30001", "1")
	f.Add("31", "1", "1")
	f.Add(strings.Repeat("9", 129), "1", "1")
	f.Add("0005", " 0042 ", "\t7")
	recv := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms, xms string) {
		h := http.Header{}
		for _, kv := range [][2]string{{"Retry-After", ra}, {"retry-after-ms", ms}, {"X-MS-RETRY-AFTER-MS", xms}} {
			if kv[1] != "\\x00absent" {
				h[kv[0]] = []string{kv[1]}
			}
		}
		var tm RetryAfterTiming
		w := parseWaitFieldsAt(h, recv, &tm)
		var timing *RetryAfterTiming
		if w.hasTiming {
			timing = &tm
		}
		delay, _, refuse, _ := waitOf(w.ra, timing, w.ms, w.msKind)
		stops := false
		for i, v := range []string{ra, ms, xms} {
			if len(v) > MaxRetryAfterBytes {
				stops = true
				continue
			}
			n, ok := digits(raTrimOWS(v))
			switch {
			case !ok:
			case i == 0 && n > 30, i > 0 && n > 30000:
				stops = true
			case i == 0 && refuse == "" && delay < time.Duration(n)*time.Second,
				i > 0 && refuse == "" && delay < time.Duration(n)*time.Millisecond:
				t.Fatalf("%q %q %q: delay %v shorter than field %d (%d)", ra, ms, xms, delay, i, n)
			}
		}
		_, raDigits := digits(raTrimOWS(ra))
		dateStop := refuse != "" && !raDigits && (w.ra.Kind == RetryAfterOverlong || w.ra.Kind == RetryAfterOversized)
		if stops != (refuse != "") && !dateStop {
			t.Fatalf("%q %q %q: refuse %q, want a stop: %v", ra, ms, xms, refuse, stops)
		}
		if refuse == "" && delay < time.Second && w.ra.Kind != RetryAfterSeconds && w.ra.Kind != RetryAfterDate {
			t.Fatalf("%q %q %q: delay %v below the fallback", ra, ms, xms, delay)
		}
	})
}

// digits parses 1*DIGIT, saturating.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		if n < 1<<40 {
			n = n*10 + int64(s[i]-'0')
		}
	}
	return n, true
}
