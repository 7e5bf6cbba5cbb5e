package main

import (
	"fmt"
	"strings"
	"testing"
)

// rawRuns writes five runs of bench for each contender, with the units'
// values from vals; run i (0 to 4) adds (i-2)·step to every unit but
// conns/op and allocs/op, so medians are the values given, and two
// contenders whose values differ by more than 4·step never overlap.
func rawRuns(bench string, vals map[string]map[string]float64, step float64) string {
	var b strings.Builder
	for i := range 5 {
		for im, units := range vals {
			fmt.Fprintf(&b, "%s/impl=%s-2 \t 1", bench, im)
			for _, u := range []string{"ns/op", "pages/s", "conns/op", "B/op", "allocs/op"} {
				if v, ok := units[u]; ok {
					d := float64(i-2) * step
					if u == "conns/op" || u == "allocs/op" {
						d = 0
					}
					fmt.Fprintf(&b, " \t %g %s", v+d, u)
				}
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func issue14(t *testing.T, raw string) string {
	t.Helper()
	r, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var w strings.Builder
	writeIssue14(&w, r)
	return w.String()
}

// s3 is scenario 3 with every contender: rr-drained at 0.98× the best peer
// (azcore), rr-budget at 0.80×.
var s3 = rawRuns("BenchmarkConcurrentSequences", map[string]map[string]float64{
	"bare":          {"ns/op": 4e8, "pages/s": 25000, "conns/op": 0, "allocs/op": 700000},
	"rr-budget":     {"ns/op": 5e8, "pages/s": 20000, "conns/op": 250, "allocs/op": 740000},
	"rr-drained":    {"ns/op": 4.1e8, "pages/s": 24500, "conns/op": 0, "allocs/op": 727000},
	"retryablehttp": {"ns/op": 4.2e8, "pages/s": 24000, "conns/op": 0, "allocs/op": 760000},
	"azcore":        {"ns/op": 4e8, "pages/s": 25000, "conns/op": 0, "allocs/op": 1000000},
	"failsafe":      {"ns/op": 4.5e8, "pages/s": 22000, "conns/op": 0, "allocs/op": 900000},
}, 10)

// loop is scenario 1 and own cost with rr-budget-each; PassThrough's
// rr-budget-each is 1.01× bare, with runs that overlap bare's.
var loop = rawRuns("BenchmarkPassThrough", map[string]map[string]float64{
	"bare":           {"ns/op": 50000},
	"rr-budget":      {"ns/op": 52000},
	"rr-budget-each": {"ns/op": 50500},
}, 400) + rawRuns("BenchmarkOwnCost", map[string]map[string]float64{
	"bare":           {"ns/op": 900, "allocs/op": 8},
	"rr-budget":      {"ns/op": 1500, "allocs/op": 8},
	"rr-budget-each": {"ns/op": 1700, "allocs/op": 10},
	"retryablehttp":  {"ns/op": 1400, "allocs/op": 13},
}, 1)

func TestIssue14Rows(t *testing.T) {
	cases := []struct {
		name string
		raw  string
		want []string // whole rows, in this order
		not  []string // substrings that must not appear
	}{
		{
			name: "every contender",
			raw:  s3 + loop,
			want: []string{
				"| (d) scenario 3 throughput, readrecovery as it is (rr-budget, re-dials included), ≥ 0.97× the best peer's (azcore) | 0.800× (20000 vs 25000 pages/s) | no (difference to azcore: p=0.008) |",
				"| (d) scenario 3 throughput without the re-dial the seed requires (rr-drained, a control, not the library: the target as issue 14 words it) ≥ 0.97× the best peer's (azcore) | 0.980× (24500 vs 25000 pages/s) | yes (difference to azcore: p=0.008) |",
				"| (d) the re-dial's share of scenario 3's throughput: (rr-drained − rr-budget) ÷ rr-drained (for the record) | 18.4% (20000 vs 24500 pages/s) | – (rr-budget below rr-drained: yes (p=0.008)) |",
				"| (d) new connections per op in scenario 3, about 250 pages of 10,000 meet a 429 (for the record) | rr-budget 250; rr-drained 0; retryablehttp 0; azcore 0; failsafe 0 | – |",
				"| loopback ratio ≤ 1.02 (rr-budget, a Budget per 10 requests here) | 1.040× | no (difference to bare: p=0.01) |",
				"| loopback ratio ≤ 1.02 with a new Budget per request (rr-budget-each) | 1.010× | yes (difference to bare: p=0.22) |",
				"| own cost ≤ 300 ns and ≤ 1 alloc per request, a Budget per 10 requests | +600 ns, +0 allocs | no |",
				"| own cost with a new Budget per request (rr-budget-each; for the record) | +800 ns, +2 allocs | – |",
			},
		},
		{
			name: "a raw.txt from before the bench-only contenders",
			raw: strings.NewReplacer("impl=rr-drained", "impl=gone", "impl=rr-budget-each", "impl=gone").Replace(
				strings.ReplaceAll(s3+loop, "conns/op", "x/op")),
			want: []string{
				"| (d) scenario 3 throughput, readrecovery as it is (rr-budget, re-dials included), ≥ 0.97× the best peer's (azcore) | 0.800× (20000 vs 25000 pages/s) | no (difference to azcore: p=0.008) |",
				"| (d) scenario 3 throughput without the re-dial the seed requires (rr-drained, a control, not the library: the target as issue 14 words it) ≥ 0.97× the best peer's | no data | not measured |",
				"| (d) the re-dial's share of scenario 3's throughput: (rr-drained − rr-budget) ÷ rr-drained (for the record) | no data | – |",
				"| (d) new connections per op in scenario 3, about 250 pages of 10,000 meet a 429 (for the record) | no data | – |",
				"| loopback ratio ≤ 1.02 with a new Budget per request (rr-budget-each) | no data | not measured |",
				"| own cost with a new Budget per request (rr-budget-each; for the record) | no data | – |",
			},
		},
		{
			name: "nothing measured",
			raw:  "",
			want: []string{
				"| (d) scenario 3 throughput, readrecovery as it is (rr-budget, re-dials included), ≥ 0.97× the best peer's | no data | not measured |",
				"| (d) scenario 3 throughput without the re-dial the seed requires (rr-drained, a control, not the library: the target as issue 14 words it) ≥ 0.97× the best peer's | no data | not measured |",
				"| loopback ratio ≤ 1.02 with a new Budget per request (rr-budget-each) | no data | not measured |",
			},
			not: []string{"loopback ratio ≤ 1.02 (rr-budget"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := issue14(t, tc.raw)
			rest := got
			for _, row := range tc.want {
				i := strings.Index(rest, row+"\n")
				if i < 0 {
					t.Fatalf("row missing or out of order:\n%s\nin:\n%s", row, got)
				}
				rest = rest[i+len(row):]
			}
			for _, s := range tc.not {
				if strings.Contains(got, s) {
					t.Errorf("%q present in:\n%s", s, got)
				}
			}
		})
	}
}

// TestWriteScenarioVariants checks that scenario 3's table lists
// rr-drained with its conns/op and that the ratio table has its row.
func TestWriteScenarioVariants(t *testing.T) {
	r, err := parse(strings.NewReader(s3))
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	for _, s := range scenarios {
		if s.bench == "BenchmarkConcurrentSequences" {
			sc = s
		}
	}
	var w strings.Builder
	writeScenario(&w, r, sc)
	got := w.String()
	for _, row := range []string{
		"| rr-drained | 410.00 ms ±0% | 0 | 727000 | 24500 | – | – | – | 0 | 1.025 | +10000000 | +27000 |",
		"| rr-budget | 500.00 ms ±0% | 0 | 740000 | 20000 | – | – | – | 250 | 1.250 | +100000000 | +40000 |",
		"| rr-drained | 0.98 (0.96) | 1.02 (0.73) | 0.91 (0.81) |",
	} {
		if !strings.Contains(got, row+"\n") {
			t.Errorf("row missing:\n%s\nin:\n%s", row, got)
		}
	}
}
