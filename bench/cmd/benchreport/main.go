// Command benchreport turns the raw output of the bench module's benchmarks
// (several runs of each, as go test -count writes them) into REPORT.md:
// the machine, a headline, one table per scenario with the median of every
// metric and its ratios to the bare transport and to each peer, the
// Retry-After microbenchmarks, the heap per live budget, the verdict on
// each current target with its p-value (targets.go: issue 27's and the
// standing ones; a target whose benchmark is not in the raw output is "not
// measured in this run"), and benchstat's own tables.
//
// Three contenders exist for the bench only: rr-budget-each (a new Budget
// per request, scenario 1 and own cost), rr-drained (scenarios 2 and 3),
// a control that drains a 429's body before readrecovery closes it unread,
// so that its connection is kept: not something the library does, only a
// way to show what R12's re-dial costs; and rr-shared, readrecovery with
// shared restrictions.
//
//	go run ./cmd/benchreport -raw raw.txt -benchstat stat.txt -out REPORT.md \
//		-go "$(go version)" -nproc 2 -cpu "AMD EPYC" -date "$(date -u)" -count 10 \
//		-prev raw.prev.txt   # optional: the previous run, for the own-cost target
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchmath"
)

func main() {
	var o options
	flag.StringVar(&o.raw, "raw", "", "raw benchmark output (required)")
	flag.StringVar(&o.benchstat, "benchstat", "", "benchstat output to include")
	flag.StringVar(&o.out, "out", "REPORT.md", "report to write")
	flag.StringVar(&o.goVersion, "go", "", "go version")
	flag.StringVar(&o.nproc, "nproc", "", "CPU count")
	flag.StringVar(&o.cpu, "cpu", "", "CPU model")
	flag.StringVar(&o.date, "date", "", "date of the run")
	flag.StringVar(&o.count, "count", "", "go test -count of the run")
	flag.StringVar(&o.note, "note", "", "a note on the run (load, shortened counts)")
	flag.StringVar(&o.prev, "prev", "", "raw output of the previous run, for the own-cost target (optional)")
	flag.Parse()
	if o.raw == "" {
		fmt.Fprintln(os.Stderr, "benchreport: -raw is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

type options struct {
	raw, benchstat, out, prev                string
	goVersion, nproc, cpu, date, count, note string
}

func run(o options) error {
	res, err := parseFile(o.raw)
	if err != nil {
		return err
	}
	var prev results
	if o.prev != "" {
		if prev, err = parseFile(o.prev); err != nil {
			return err
		}
	}
	var stat []byte
	if o.benchstat != "" {
		if stat, err = os.ReadFile(o.benchstat); err != nil {
			return err
		}
	}
	var b strings.Builder
	write(&b, o, res, prev, string(stat))
	return os.WriteFile(o.out, []byte(b.String()), 0o644)
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) to its
// runs, each a map from unit to value.
type results map[string][]map[string]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

func parseFile(path string) (results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f)
}

// parse reads go test -bench output.
func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(fields[0], "")
		run := map[string]float64{}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			run[fields[i+1]] = v
		}
		res[name] = append(res[name], run)
	}
	return res, sc.Err()
}

// stat is the median of one metric over the runs, and the spread: the
// largest distance of a run from the median, in percent of it.
type stat struct {
	median, spread float64
	n              int
}

func (r results) stat(name, unit string) (stat, bool) {
	var vs []float64
	for _, run := range r[name] {
		if v, ok := run[unit]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return stat{}, false
	}
	slices.Sort(vs)
	m := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	var d float64
	for _, v := range vs {
		d = max(d, math.Abs(v-m))
	}
	s := stat{median: m, n: len(vs)}
	if m != 0 {
		s.spread = 100 * d / m
	}
	return s, true
}

func (r results) values(name, unit string) []float64 {
	var vs []float64
	for _, run := range r[name] {
		if v, ok := run[unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// pvalue is the Mann-Whitney U test's p-value (benchstat's) of the two
// benchmarks' runs of unit coming from one distribution; false when either
// has fewer than two runs.
func (r results) pvalue(a, b, unit string) (float64, bool) {
	va, vb := r.values(a, unit), r.values(b, unit)
	if len(va) < 2 || len(vb) < 2 {
		return 0, false
	}
	c := benchmath.AssumeNothing.Compare(benchmath.NewSample(va, &benchmath.DefaultThresholds), benchmath.NewSample(vb, &benchmath.DefaultThresholds))
	return c.P, true
}

func (r results) median(name, unit string) (float64, bool) {
	s, ok := r.stat(name, unit)
	return s.median, ok
}

// The contenders, in report order. variants are readrecovery's: rr-nobudget
// and rr-budget as users run it, and the bench-only ones: rr-budget-each (a
// new Budget per request), rr-drained (a control without R12's re-dial) and
// rr-shared (shared restrictions). Each scenario table shows the ones it has
// data for.
var (
	impls    = []string{"bare", "rr-nobudget", "rr-budget", "rr-budget-each", "rr-drained", "rr-shared", "rr-azure", "retryablehttp", "azcore", "failsafe"}
	variants = []string{"rr-nobudget", "rr-budget", "rr-budget-each", "rr-drained", "rr-shared"}
	peers    = []string{"retryablehttp", "azcore", "failsafe"}
)

// drainedNote says what rr-drained is wherever it appears.
const drainedNote = "`rr-drained` is a control, not something readrecovery does: `rr-budget` over a base transport that reads a 429's body " +
	"into memory (at most 64 KiB) and closes it before readrecovery sees the 429, so that when readrecovery closes the body unread (R12) " +
	"the connection is already back in the pool. The difference to `rr-budget` is the re-dial R12 costs on HTTP/1.1."

type scenario struct {
	bench, title, text string
	extra              []string // extra metric units, in order
}

var scenarios = []scenario{
	{"BenchmarkPassThrough", "Scenario 1: pass-through 200 (loopback)",
		"One GET at a time over the loopback server (httptest, HTTP/1.1 keep-alive), body read and closed. " +
			"readrecovery with a budget makes one Budget per 10 requests (a 10-page sequence); `rr-budget-each` makes a new one for every request. " +
			"B/op and allocs/op include the in-process server's share, the same for every contender.", nil},
	{"BenchmarkOwnCost", "Scenario 1 without the network: own cost over an in-process stub",
		"The same loop over a stub transport that returns a shared 200: the difference to `bare` is what the contender itself adds. " +
			"`rr-budget-each` makes a new Budget for every request.", nil},
	{"BenchmarkRecovered429", "Scenario 2: one 429 (Retry-After: 0), then 200",
		"One op is one recovered request: a 429 with `Retry-After: 0`, the re-send, its 200, in a new sequence each time. " +
			"`bare` re-sends by hand at once (the floor). `conns/op` counts new TCP connections per recovered request. " + drainedNote, []string{"conns/op"}},
	{"BenchmarkConcurrentSequences", "Scenario 3: 1,000 concurrent sequences × 10 pages, 429s at random",
		"One op runs 1,000 concurrent sequences of 10 pages; one sequence in 4 meets a 429 (`Retry-After: 0`) on a random page, which every contender recovers. " +
			"Per-host connection limit 64 for everyone. p50/p99 are page latencies (a throttled page includes its re-send), " +
			"averaged over ops; peak heap is the highest heap (objects, live and unswept) above the start, sampled every millisecond; " +
			"`conns/op` counts the new TCP connections per op after a warm-up op filled the pools (about 250 pages per op meet a 429). " + drainedNote,
		[]string{"pages/s", "p50-ns", "p99-ns", "peak-heap-B", "conns/op"}},
	{"BenchmarkRecovered429H2", "Scenario (a): one 429 (Retry-After: 0), then 200, over TLS and HTTP/2",
		"Scenario 2 over `httptest` with `EnableHTTP2` and `StartTLS`; every request is checked to arrive over HTTP/2. " +
			"A 429 body closed unread resets its stream, not the connection, so no contender should dial again. " +
			"`dial-ns/op` is the time from asking for a connection to getting a new one (dial and handshake, httptrace), per recovered request.",
		[]string{"conns/op", "dial-ns/op"}},
	{"BenchmarkRecovered429After1/proto=h1", "Scenario (b): one 429 with Retry-After: 1, then 200 (HTTP/1.1, loopback)",
		"A recovered request that waits the second the server asks. `bare` waits it by hand. " +
			"`dial-%` is the time spent getting new connections as a share of the whole recovered request: what readrecovery's re-dial (R12) costs in these conditions.",
		[]string{"conns/op", "dial-ns/op", "dial-%"}},
	{"BenchmarkRecovered429After1/proto=h1tls", "Scenario (b) over TLS: one 429 with Retry-After: 1, then 200 (HTTP/1.1 over TLS, loopback)",
		"The same over TLS without HTTP/2, so that a new connection costs a TLS handshake (still on loopback: no network round trip).",
		[]string{"conns/op", "dial-ns/op", "dial-%"}},
	{"BenchmarkThrottleBurst", "Scenario (c): a throttle burst, 200 concurrent sequences × 5 pages meet a 2 s throttle window",
		"One op opens a 2 s window on the server (every request inside it gets a 429 whose Retry-After is the window's remaining whole seconds) " +
			"and starts 200 sequences of 5 pages at once. `in-window-reqs/op` counts the requests that reached the server inside the window " +
			"(200, one per sequence, without shared restrictions; 1 with them, issue 27's target); `goodput-pages/s` is pages answered 200 per second of the op. `bare` re-sends once at once, by hand: a client without a policy.",
		[]string{"in-window-reqs/op", "failed-pages/op", "goodput-pages/s"}},
	{"BenchmarkTokenBucket", "Scenario (e): 500 sequences × 10 pages against a 200/s token bucket (burst 50)",
		"One op runs 500 concurrent sequences of 10 pages against `TokenBucket(200/s, 50)` on one account; a 429's Retry-After is the time to the next token, " +
			"rounded up to whole seconds. Per op: `completed-seqs/op` sequences finished, `429s/op` throttled answers the server sent, `server-reqs/op` requests it saw, " +
			"`pages/op` pages answered 200 and `pages/s` their rate over the op, `p99-seq-ms` the p99 time of a completed sequence.",
		[]string{"completed-seqs/op", "429s/op", "server-reqs/op", "pages/op", "pages/s", "p99-seq-ms"}},
	{"BenchmarkServerBusy", "Scenario (f): the same bucket answering 503 ServerBusy (no Retry-After)",
		"Scenario (e) with Azure Storage's 503 ServerBusy instead of the 429: readrecovery passes a 503 on; the peers retry it with their back-off (0 here).",
		[]string{"completed-seqs/op", "503s/op", "server-reqs/op", "pages/op", "pages/s", "p99-seq-ms"}},
	{"BenchmarkSubscriptions", "Scenario (g): two subscriptions on one Resource Manager host, one of them throttled",
		"Sequences of two subscriptions share one host; only the first subscription's bucket throttles. " +
			"`other-delayed-reqs/op` counts the requests of the other subscription that were held or delayed by the first one's throttle.",
		[]string{"other-delayed-reqs/op", "completed-seqs/op", "429s/op"}},
	{"BenchmarkQuotaHeaders/header=on", "Scenario (h): a deployment that reports its remaining quota",
		"Sequences against an Azure OpenAI deployment whose bucket sends `x-ratelimit-remaining-requests`. " +
			"`max-429s-per-window` is the most 429s the server sent in one quota window of the op.",
		[]string{"max-429s-per-window", "completed-seqs/op", "429s/op"}},
	{"BenchmarkQuotaHeaders/header=off", "Scenario (h) without the header",
		"The same deployment and bucket without the remaining-quota header: the completions (h) must not fall below.",
		[]string{"max-429s-per-window", "completed-seqs/op", "429s/op"}},
	{"BenchmarkSlowServer/n=16/latency=1s", "Scenario (s): a slow server that never throttles, 16 GETs at once answered after 1 s",
		"A loopback server (httptest, HTTP/1.1) that never throttles answers every GET 200 after a fixed latency. One op is one burst of concurrent GETs, " +
			"each with a Budget of its own (`rr-shared`, `rr-azure`), over a new Transport whose base allows as many connections to the host as the burst has requests. " +
			"`burst-s` is the burst's wall time, from its start to the last body read; `refused` the requests that returned an error; " +
			"`max-inflight` the most requests the server had in flight at once; `first-to-last-arrival-s` the time from its first arrival to its last. " +
			"R98: a scope that has said nothing sees the same concurrency as without shared restrictions. `rr-azure` is shared restrictions by `AzureScope` (the Azure wirings' default; for a loopback host the same scope as `rr-shared`'s).",
		[]string{"burst-s", "refused", "max-inflight", "first-to-last-arrival-s"}},
	{"BenchmarkSlowServer/n=16/latency=5s", "Scenario (s): 16 GETs at once answered after 5 s", "The same burst against the server answering after 5 s.",
		[]string{"burst-s", "refused", "max-inflight", "first-to-last-arrival-s"}},
	{"BenchmarkSlowServer/n=64/latency=1s", "Scenario (s): 64 GETs at once answered after 1 s", "The same with 64 GETs (and 64 connections) per burst.",
		[]string{"burst-s", "refused", "max-inflight", "first-to-last-arrival-s"}},
	{"BenchmarkSlowServer/n=64/latency=5s", "Scenario (s): 64 GETs at once answered after 5 s", "64 GETs against the server answering after 5 s.",
		[]string{"burst-s", "refused", "max-inflight", "first-to-last-arrival-s"}},
	{"BenchmarkGoroutinesInFlight", "Goroutines per in-flight request (blocked server)",
		"20 GETs of one sequence wait on a blocked loopback server over 20 kept-alive connections (a warm-up round makes them). " +
			"`goroutines/req` is the growth of `runtime.NumGoroutine` per request (the caller's goroutine and the server's handler included, " +
			"the same for everyone: the difference to `bare` is the contender's own); " +
			"`created/req` counts goroutines created per request (`/sched/goroutines-created`). ns/op is not meaningful here.",
		[]string{"goroutines/req", "created/req"}},
	{"BenchmarkFinishedSequences", "What finished sequences leave behind: 200,000 one-request sequences",
		"One op runs 200,000 one-request sequences over the in-process stub (a new Budget each for `rr-budget`), drops them, and measures the live heap growth " +
			"per sequence right after (HeapAlloc after two full collections), while their totals would still run. " +
			"runtime/metrics has no count of live timers in this Go version, so a timer left behind shows here as heap.",
		[]string{"B/seq"}},
}

func write(w *strings.Builder, o options, r, prev results, stat string) {
	fmt.Fprintf(w, "# readrecovery benchmarks\n\n")
	fmt.Fprintf(w, "Written by `bench/run` (cmd/benchreport); do not edit by hand, re-run it.\n\n")
	fmt.Fprintf(w, "| machine | |\n|---|---|\n")
	fmt.Fprintf(w, "| date | %s |\n| go | %s |\n| CPUs (nproc) | %s |\n| CPU model | %s |\n| runs per benchmark (-count) | %s |\n",
		o.date, o.goVersion, o.nproc, o.cpu, o.count)
	if o.note != "" {
		fmt.Fprintf(w, "| note | %s |\n", o.note)
	}
	fmt.Fprintf(w, "\nEvery figure is the median of the runs; ± is the largest distance of a run from it. "+
		"Ratios below 1 mean readrecovery is faster or smaller. benchstat's tables, with confidence intervals and p-values, are at the end.\n\n")

	writeHeadline(w, r)
	writeTargets(w, r, prev)
	for _, s := range scenarios {
		writeScenario(w, r, s)
	}
	writeRetryAfter(w, r)
	writeHeap(w, r)
	writeConfig(w)
	if stat != "" {
		fmt.Fprintf(w, "## benchstat\n\n```\n%s```\n", stat)
	}
}

func name(bench, impl string) string { return bench + "/impl=" + impl }

func writeHeadline(w *strings.Builder, r results) {
	fmt.Fprintf(w, "## Headline\n\n")
	fmt.Fprintf(w, "| scenario | bare | readrecovery | retryablehttp | azcore | failsafe-go |\n|---|---|---|---|---|---|\n")
	row := func(label, bench, unit string, f func(float64) string) {
		fmt.Fprintf(w, "| %s ", label)
		for _, im := range []string{"bare", "rr-budget", "retryablehttp", "azcore", "failsafe"} {
			if v, ok := r.median(name(bench, im), unit); ok {
				fmt.Fprintf(w, "| %s ", f(v))
			} else {
				fmt.Fprintf(w, "| – ")
			}
		}
		fmt.Fprintf(w, "|\n")
	}
	row("1. pass-through 200, loopback", "BenchmarkPassThrough", "ns/op", fmtNs)
	row("1. own cost over a stub", "BenchmarkOwnCost", "ns/op", fmtNs)
	row("1. own cost over a stub, allocs/op", "BenchmarkOwnCost", "allocs/op", fmtNum)
	row("2. recovered 429", "BenchmarkRecovered429", "ns/op", fmtNs)
	row("3. throughput (pages/s)", "BenchmarkConcurrentSequences", "pages/s", fmtNum)
	row("3. p99 page latency", "BenchmarkConcurrentSequences", "p99-ns", fmtNs)
	row("3. peak heap", "BenchmarkConcurrentSequences", "peak-heap-B", fmtBytes)
	row("3. new connections per op", "BenchmarkConcurrentSequences", "conns/op", fmtNum)
	row("(a) recovered 429, HTTP/2 + TLS", "BenchmarkRecovered429H2", "ns/op", fmtNs)
	row("(a) new connections per recovered 429", "BenchmarkRecovered429H2", "conns/op", fmtNum)
	row("(b) recovered 429, Retry-After: 1", "BenchmarkRecovered429After1/proto=h1", "ns/op", fmtNs)
	row("(b) share spent re-dialling, % (h1)", "BenchmarkRecovered429After1/proto=h1", "dial-%", fmtNum)
	row("(b) share spent re-dialling, % (h1 + TLS)", "BenchmarkRecovered429After1/proto=h1tls", "dial-%", fmtNum)
	row("(c) requests inside the 2 s window", "BenchmarkThrottleBurst", "in-window-reqs/op", fmtNum)
	row("(c) goodput (pages/s)", "BenchmarkThrottleBurst", "goodput-pages/s", fmtNum)
	row("goroutines per in-flight request", "BenchmarkGoroutinesInFlight", "goroutines/req", fmtNum)
	row("heap per finished sequence", "BenchmarkFinishedSequences", "B/seq", fmtBytes)
	if v, ok := r.median("BenchmarkHeapPerLiveBudget", "B/budget"); ok {
		fmt.Fprintf(w, "\nHeap per live budget: **%.0f B**.\n", v)
	}
	fmt.Fprintf(w, "\n`readrecovery` is `rr-budget` (with a Budget per sequence); `rr-nobudget`, `rr-budget-each` (a Budget per request), "+
		"`rr-drained` (a control without R12's re-dial, not the library) and `rr-shared` (shared restrictions) are in the scenario tables and the targets.\n\n")
}

func writeScenario(w *strings.Builder, r results, s scenario) {
	var present []string
	for _, im := range impls {
		if _, ok := r[name(s.bench, im)]; ok {
			present = append(present, im)
		}
	}
	if len(present) == 0 {
		return
	}
	fmt.Fprintf(w, "## %s\n\n%s\n\n", s.title, s.text)
	fmt.Fprintf(w, "| impl | ns/op | B/op | allocs/op |")
	for _, u := range s.extra {
		fmt.Fprintf(w, " %s |", u)
	}
	fmt.Fprintf(w, " ns × bare | Δ ns vs bare | Δ allocs vs bare |\n|---|---|---|---|")
	for range s.extra {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintf(w, "---|---|---|\n")
	bare, okb := r.median(name(s.bench, "bare"), "ns/op")
	bareA, _ := r.median(name(s.bench, "bare"), "allocs/op")
	for _, im := range present {
		n := name(s.bench, im)
		ns, _ := r.stat(n, "ns/op")
		bo, _ := r.median(n, "B/op")
		al, _ := r.median(n, "allocs/op")
		fmt.Fprintf(w, "| %s | %s ±%.0f%% | %s | %s |", im, fmtNs(ns.median), ns.spread, fmtNum(bo), fmtNum(al))
		for _, u := range s.extra {
			v, ok := r.median(n, u)
			switch {
			case !ok:
				fmt.Fprintf(w, " – |")
			case strings.HasSuffix(u, "-ns"):
				fmt.Fprintf(w, " %s |", fmtNs(v))
			case strings.HasSuffix(u, "-B"):
				fmt.Fprintf(w, " %s |", fmtBytes(v))
			default:
				fmt.Fprintf(w, " %s |", fmtNum(v))
			}
		}
		if okb {
			fmt.Fprintf(w, " %.3f | %+.0f | %+.0f |\n", ns.median/bare, ns.median-bare, al-bareA)
		} else {
			fmt.Fprintf(w, " – | – | – |\n")
		}
	}
	// readrecovery against each peer.
	fmt.Fprintf(w, "\nreadrecovery ÷ peer (ns/op; allocs/op in brackets):\n\n| | ")
	fmt.Fprintf(w, "%s |\n|---|", strings.Join(peers, " | "))
	for range peers {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintf(w, "\n")
	for _, im := range variants {
		v, ok := r.median(name(s.bench, im), "ns/op")
		if !ok {
			continue
		}
		a, _ := r.median(name(s.bench, im), "allocs/op")
		fmt.Fprintf(w, "| %s |", im)
		for _, p := range peers {
			pv, pok := r.median(name(s.bench, p), "ns/op")
			pa, _ := r.median(name(s.bench, p), "allocs/op")
			if !pok {
				fmt.Fprintf(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %.2f (%.2f) |", v/pv, a/pa)
		}
		fmt.Fprintf(w, "\n")
	}
	fmt.Fprintf(w, "\n")
}

func writeRetryAfter(w *strings.Builder, r results) {
	forms := []string{"seconds", "zero", "imf-fixdate", "rfc850", "asctime", "missing", "invalid", "duplicate", "overlong", "oversized"}
	if _, ok := r["BenchmarkRetryAfter/form=seconds/parser=readrecovery"]; !ok {
		return
	}
	fmt.Fprintf(w, "## Retry-After parsing\n\n")
	fmt.Fprintf(w, "`readrecovery` is `ParseRetryAfter` over a typical Azure 429's header map (eight fields plus Retry-After; "+
		"the lookup is case-insensitive across every key, R17), with a receipt time so the timing is built. "+
		"The baselines parse the value alone (`value`: `strconv.Atoi` for delay-seconds forms, `http.ParseTime` for the dates) "+
		"or after `http.Header.Get` (`get+value`); they check no duplicate, size or ceiling and build no timing: floors, not equivalents.\n\n")
	fmt.Fprintf(w, "| form | readrecovery | allocs | value | allocs | get+value | allocs | readrecovery ÷ get+value |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range forms {
		base := "BenchmarkRetryAfter/form=" + f + "/parser="
		rr, ok := r.median(base+"readrecovery", "ns/op")
		if !ok {
			continue
		}
		ra, _ := r.median(base+"readrecovery", "allocs/op")
		v, _ := r.median(base+"value", "ns/op")
		va, _ := r.median(base+"value", "allocs/op")
		g, _ := r.median(base+"get+value", "ns/op")
		ga, _ := r.median(base+"get+value", "allocs/op")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.2f |\n", f, fmtNs(rr), fmtNum(ra), fmtNs(v), fmtNum(va), fmtNs(g), fmtNum(ga), rr/g)
	}
	fmt.Fprintf(w, "\n")
}

func writeHeap(w *strings.Builder, r results) {
	s, ok := r.stat("BenchmarkHeapPerLiveBudget", "B/budget")
	if !ok {
		return
	}
	fmt.Fprintf(w, "## Heap per live budget\n\n")
	fmt.Fprintf(w, "1,000 sequences per op, each with its Budget and context kept alive and one request made over the loopback server "+
		"(so its clock runs, its total's timer is set and its evidence holds one read with a request ID from the network); "+
		"growth of HeapAlloc after full collections, divided by 1,000: **%.0f B** ±%.0f%% per live budget (target ≤ 1,024 B; "+
		"`TestHeapPerLiveBudget` checks it over 10,000).\n\n", s.median, s.spread)
}

func writeConfig(w *strings.Builder) {
	fmt.Fprintf(w, "## How each contender is configured\n\n"+
		"Every contender has its own `cleanhttp.DefaultPooledTransport()` (scenario 3: `MaxConnsPerHost` and `MaxIdleConnsPerHost` 64 for everyone) "+
		"and is reached through an `http.Client` that returns redirects; every peer waits exactly what the server asks, so 0 for `Retry-After: 0`.\n\n"+
		"- **readrecovery**: `readrecovery.New(base)` in such a client; `rr-budget` puts a new `NewBudget` in each sequence's context (every 10 requests in scenario 1, every request in scenario 2, every sequence in scenario 3); "+
		"`rr-budget-each` (scenario 1 and own cost only) puts a new one in every request's context.\n"+
		"- **rr-drained** (scenarios 2 and 3 only): a control, not something the library does: `rr-budget` over a base that, for a 429 only, "+
		"reads the body into memory (`io.ReadAll`, at most 64 KiB), closes the original and hands back a copy, so the connection is back in the pool "+
		"before readrecovery closes the 429's body unread (R12). It shows what R12's re-dial costs; readrecovery itself always re-dials after a 429 on HTTP/1.1.\n"+
		"- **go-retryablehttp** v0.7.8: `&retryablehttp.RoundTripper{Client: c}` with `c.HTTPClient` over the base, `RetryWaitMin` 0 "+
		"(its `DefaultBackoff` returns a 429's Retry-After as it is, otherwise min·2ⁿ = 0), `Logger` nil (the default logs every attempt), `RetryMax` 4 (default).\n"+
		"- **azcore** v1.24.0: `runtime.NewPipeline` with `ClientOptions.Transport` an `http.Client` over the base, default policies, "+
		"`RetryOptions.RetryDelay` 1 ns. azcore honours Retry-After only above 0; for `Retry-After: 0` it uses its own exponential delay (800 ms by default). "+
		"Its documented \"no delay\", `RetryDelay: -1`, waits `MaxRetryDelay` (60 s) in this version: `calcDelay` takes 1·0 = 0 for an overflow. 1 ns gives a 0–1 ns delay.\n"+
		"- **failsafe-go** v0.9.8: `failsafehttp.NewRoundTripper(base, failsafehttp.NewRetryPolicyBuilder()...Build())` "+
		"(honours delay-seconds Retry-After, default delay 0, 2 retries) plus an `OnRetryScheduled` listener that drains and closes the "+
		"retried response: failsafehttp drops it with its body open, which holds its keep-alive connection.\n\n")
}

func fmtNs(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3f s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1f µs", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f ns", v)
	default:
		return fmt.Sprintf("%.1f ns", v)
	}
}

func fmtBytes(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
