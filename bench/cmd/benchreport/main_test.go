package main

import (
	"fmt"
	"os"
	"path/filepath"
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

// wantTargets is the whole target table of testdata/raw.txt against
// testdata/prev.txt: every target measured (the fleet's rr-dir only);
// missed ("no"): the fleet's 429s and completions, scenario 3,
// rr-budget-each's pass-through, (s)'s 16 GETs at 5 s and its refusals;
// (s)'s 64 GETs at 1 s above its bound but not shown different from bare
// (p ≥ 0.05); own cost shown above the previous run.
const wantTargets = "" +
	"| target | benchmark and metric | measured (medians) | p-value | met |\n" +
	"|---|---|---|---|---|\n" +
	"| 27 (c): exactly 1 request inside the 2 s window, in every round (rr-shared) | `BenchmarkThrottleBurst/impl=rr-shared` in-window-reqs/op | rounds: 1, 1, 1, 1, 1 (best peer retryablehttp 200) | 0.008 vs retryablehttp | yes |\n" +
	"| 27 (c): goodput \u2265 0.95\u00d7 the best peer's (rr-shared) | `BenchmarkThrottleBurst/impl=rr-shared` goodput-pages/s | 0.959\u00d7 (470 vs failsafe 490) | 0.008 vs failsafe | yes |\n" +
	"| 27 (e): \u2264 100 429s in all (rr-shared) | `BenchmarkTokenBucket/impl=rr-shared` 429s/op | 40 (best peer failsafe 1700) | 0.008 vs failsafe | yes |\n" +
	"| 27 (e): \u2265 495 of 500 sequences completed (rr-shared) | `BenchmarkTokenBucket/impl=rr-shared` completed-seqs/op | 497 (best peer retryablehttp 56) | 0.008 vs retryablehttp | yes |\n" +
	"| 27 (e): \u2265 181 pages/s, 0.95\u00d7 the two-penalty ceiling (rr-shared) | `BenchmarkTokenBucket/impl=rr-shared` pages/s | 192 (best peer failsafe 63) | 0.008 vs failsafe | yes |\n" +
	"| 27 (g): two subscriptions on one Resource Manager host: throttling one delays no request of the other (rr-azure: shared restrictions by AzureScope) | `BenchmarkSubscriptions/impl=rr-azure` other-delayed-reqs/op | rounds: 0, 0, 0, 0, 0 (host scope, rr-shared: 40) | 0.008 vs rr-shared | yes |\n" +
	"| 27 (h): a deployment reporting its remaining quota: at most 1 429 per quota window (rr-shared) | `BenchmarkQuotaHeaders/header=on/impl=rr-shared` max-429s-per-window | rounds: 1, 1, 0, 1, 1 (without the header 12) | 0.008 vs header=off | yes |\n" +
	"| 27 (h): completions with the header not below those without (rr-shared) | `BenchmarkQuotaHeaders/header=on/impl=rr-shared` completed-seqs/op | 100 vs 90 without | 0.008 vs header=off | yes |\n" +
	"| 27: scenario 3 (no throttle) with shared restrictions \u2265 0.97\u00d7 the throughput without (rr-shared vs rr-budget) | `BenchmarkConcurrentSequences/impl=rr-shared` pages/s | 0.958\u00d7 (23000 vs 24000 pages/s) | 0.008 vs rr-budget | no |\n" +
	"| 27: own cost per request not significantly above the previous run's (rr-budget over the stub) | `BenchmarkOwnCost/impl=rr-budget` ns/op | 1150 ns vs 1100 ns before | 0.008 vs previous | no |\n" +
	"| R98 (s): a slow server that never throttles, 16 GETs at once answered after 1 s: the burst \u2264 1.25\u00d7 bare's (rr-shared) | `BenchmarkSlowServer/n=16/latency=1s/impl=rr-shared` burst-s | 1.098\u00d7 (1.12 s vs bare 1.02 s) | 0.008 vs bare | yes |\n" +
	"| R98 (s): a slow server that never throttles, 16 GETs at once answered after 5 s: the burst \u2264 1.10\u00d7 bare's (rr-shared) | `BenchmarkSlowServer/n=16/latency=5s/impl=rr-shared` burst-s | 4.024\u00d7 (20.20 s vs bare 5.02 s) | 0.008 vs bare | no |\n" +
	"| R98 (s): a slow server that never throttles, 64 GETs at once answered after 1 s: the burst \u2264 1.25\u00d7 bare's (rr-shared) | `BenchmarkSlowServer/n=64/latency=1s/impl=rr-shared` burst-s | 1.275\u00d7 (1.30 s vs bare 1.02 s) | 0.214 vs bare | not shown |\n" +
	"| R98 (s): a slow server that never throttles, 64 GETs at once answered after 5 s: the burst \u2264 1.10\u00d7 bare's (rr-shared) | `BenchmarkSlowServer/n=64/latency=5s/impl=rr-shared` burst-s | 1.020\u00d7 (5.12 s vs bare 5.02 s) | 0.008 vs bare | yes |\n" +
	"| R98 (s): no request refused, in every round of every burst (rr-shared) | `BenchmarkSlowServer/impl=rr-shared` refused | most in a round, n/latency: 16/1s 0, 16/5s 2, 64/1s 0, 64/5s 0 | \u2013 | no |\n" +
	"| 14: own cost \u2264 300 ns and \u2264 1 alloc per request, a Budget per 10 requests (rr-budget) | `BenchmarkOwnCost/impl=rr-budget` ns/op | +250 ns, +1 allocs | 0.008 vs bare | yes |\n" +
	"| 14: pass-through on loopback \u2264 1.02\u00d7 bare, a Budget per 10 requests (rr-budget) | `BenchmarkPassThrough/impl=rr-budget` ns/op | 1.010\u00d7 | 0.008 vs bare | yes |\n" +
	"| 14: pass-through on loopback \u2264 1.02\u00d7 bare with a new Budget per request (rr-budget-each) | `BenchmarkPassThrough/impl=rr-budget-each` ns/op | 1.120\u00d7 | 0.008 vs bare | no |\n" +
	"| 14: 0 extra goroutines per in-flight request of a sequence (rr-budget) | `BenchmarkGoroutinesInFlight/impl=rr-budget` goroutines/req | +0.00 (2 vs bare 2) | 1.000 vs bare | yes |\n" +
	"| 14: \u2264 128 B held per finished sequence while its total would run (rr-budget) | `BenchmarkFinishedSequences/impl=rr-budget` B/seq | 9 B | 0.008 vs bare | yes |\n" +
	"| 14 (a): over HTTP/2 + TLS a recovered 429 opens no new connection (rr-budget) | `BenchmarkRecovered429H2/impl=rr-budget` conns/op | 0 | 1.000 vs bare | yes |\n" +
	"| 6: \u2264 1 KiB heap per live budget | `BenchmarkHeapPerLiveBudget` B/budget | 1010 B | \u2013 | yes |\n" +
	"| 37 F1: 4 processes' 429s \u2264 1.1\u00d7 one process's (rr-dir) | `BenchmarkFleetCheckpoints/contender=rr-dir/procs=4` 429s | 13 vs 4 (3.25\u00d7) | 0.008 vs 1 process | no |\n" +
	"| 37 F1: 4 processes' wall time \u2264 1.1\u00d7 one process's (rr-dir) | `BenchmarkFleetCheckpoints/contender=rr-dir/procs=4` wall-s | 18.20 vs 17.10 (1.06\u00d7) | 0.008 vs 1 process | yes |\n" +
	"| 37 F1: 4 processes complete \u2265 one process's (rr-dir) | `BenchmarkFleetCheckpoints/contender=rr-dir/procs=4` completed | 155 vs 159 (0.97\u00d7) | 0.008 vs 1 process | no |\n" +
	""

func targetTable(t *testing.T, raw, prev string) string {
	t.Helper()
	r, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var p results
	if prev != "" {
		if p, err = parse(strings.NewReader(prev)); err != nil {
			t.Fatal(err)
		}
	}
	var w strings.Builder
	writeTargets(&w, r, p)
	got := w.String()
	return got[strings.Index(got, "| target |"):]
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTargetsTable(t *testing.T) {
	got := targetTable(t, readFixture(t, "raw.txt"), readFixture(t, "prev.txt"))
	if got != wantTargets+"\n" {
		t.Errorf("target table:\n%s\nwant:\n%s", got, wantTargets)
	}
}

// TestTargetsFindAliases: the same runs under other spellings (another
// GOMAXPROCS suffix, sub-benchmark keys in another order, a unit in
// capitals without "/op", the aliases a target lists) give the same table.
func TestTargetsFindAliases(t *testing.T) {
	raw := strings.NewReplacer(
		"-2 \t", "-8 \t",
		"BenchmarkQuotaHeaders/header=on/impl=rr-shared", "BenchmarkQuotaHeaders/impl=rr-shared/header=on",
		"BenchmarkSubscriptions/", "BenchmarkTwoSubscriptions/",
		"other-delayed-reqs/op", "delayed-reqs/op",
		"in-window-reqs/op", "In-Window-Reqs",
		"BenchmarkSlowServer/n=16/latency=5s/impl=rr-shared", "BenchmarkSlowServer/impl=rr-shared/latency=5s/n=16",
		"burst-s", "Burst-S/op",
	).Replace(readFixture(t, "raw.txt"))
	if raw == readFixture(t, "raw.txt") {
		t.Fatal("the replacer changed nothing")
	}
	if got := targetTable(t, raw, readFixture(t, "prev.txt")); got != wantTargets+"\n" {
		t.Errorf("target table:\n%s\nwant:\n%s", got, wantTargets)
	}
}

// TestTargetsNotMeasured: with no run at all, every target is "not measured
// in this run", never "no"; a benchmark without the target's metric says
// which metric is missing; no previous run leaves the own-cost target
// unjudged.
func TestTargetsNotMeasured(t *testing.T) {
	got := targetTable(t, "", "")
	for _, line := range strings.Split(strings.TrimSpace(got), "\n")[2:] {
		if !strings.HasSuffix(line, "| – | – | not measured in this run |") {
			t.Errorf("row not 'not measured in this run': %s", line)
		}
	}
	if n := strings.Count(strings.TrimSpace(got), "\n") + 1; n != 2+25 {
		t.Errorf("%d lines, want a header and 25 rows (the fleet's rr-dir alone):\n%s", n, got)
	}
	raw := strings.ReplaceAll(readFixture(t, "raw.txt"), "goodput-pages/s", "other/op")
	got = targetTable(t, raw, "")
	for _, row := range []string{
		"| 27 (c): goodput ≥ 0.95× the best peer's (rr-shared) | `BenchmarkThrottleBurst/impl=rr-shared` goodput-pages/s | – | – | not measured in this run (no goodput-pages/s) |",
		"| 27: own cost per request not significantly above the previous run's (rr-budget over the stub) | `BenchmarkOwnCost/impl=rr-budget` ns/op | 1150 ns | – | not measured in this run (no previous run given: -prev) |",
	} {
		if !strings.Contains(got, row+"\n") {
			t.Errorf("row missing:\n%s\nin:\n%s", row, got)
		}
	}
}

// TestFleetFirstWindow: a fleet run that counts the 429s inside the
// first 429's window (integration's 429s-first-window) shows them beside
// the 429s, four processes' against one's; the judgement is the 429s'.
func TestFleetFirstWindow(t *testing.T) {
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, "BenchmarkFleetCheckpoints/contender=rr-dir/procs=1-2 \t 1 \t 17000000000 ns/op \t %d 429s \t %d 429s-first-window \t 159 completed \t 320 requests \t 17.0 wall-s\n", 3+i%2, 1+i%2)
		fmt.Fprintf(&b, "BenchmarkFleetCheckpoints/contender=rr-dir/procs=4-2 \t 1 \t 18000000000 ns/op \t %d 429s \t %d 429s-first-window \t 155 completed \t 320 requests \t 18.0 wall-s\n", 12+i, 8+i%3)
	}
	got := targetTable(t, b.String(), "")
	row := "| 37 F1: 4 processes' 429s ≤ 1.1× one process's (rr-dir) | `BenchmarkFleetCheckpoints/contender=rr-dir/procs=4` 429s | 14 vs 3 (4.67×); in the first 429's window 9 vs 1 | 0.008 vs 1 process | no |"
	if !strings.Contains(got, row+"\n") {
		t.Errorf("row missing:\n%s\nin:\n%s", row, got)
	}
}
