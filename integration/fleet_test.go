package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
)

// Issue 36: issue 27's checkpoint scenario (citizenship_test.go) read by a
// fleet of real OS processes that share one storage account and no store.
// The parent starts Azurite and one proxy (the rig, TokenBucket(20, 10) per
// account), seeds each member's two blobs, and runs the test binary again
// once per member (TestFleetMember). The members start together at an
// instant the parent chose, each runs its share of the fleet's sequences at
// once (a Budget each, two GETs, bodies checked) and prints its counts as
// one JSON line. The proxy's ledger counts what the account received.

// Environment of a fleet member: the test binary runs itself as one
// process of the fleet (TestFleetMember).
const (
	envFleetProxy     = "RR_FLEET_PROXY"     // the rig's proxy, http://127.0.0.1:PORT
	envFleetContainer = "RR_FLEET_CONTAINER" // the rig's container
	envFleetContender = "RR_FLEET_CONTENDER" // a name of fleetContenders
	envFleetSequences = "RR_FLEET_SEQUENCES" // the member's sequences
	envFleetMember    = "RR_FLEET_MEMBER"    // 1-based
	envFleetStart     = "RR_FLEET_START"     // Unix nanoseconds: when the members start
	envFleetStoreDir  = "RR_FLEET_STORE_DIR" // the fleet's directory scope store (rr-dir)
)

// fleetSequences is the fleet's whole work in issue 36: 160 checkpoint
// sequences, divided among the processes.
const fleetSequences = 160

// fleetContender is how a member builds its client's options. Each member
// builds them once, in its own process: rr's members share nothing (one
// table of scopes per process, R102). Issue 37 adds contenders with a
// scope store here.
type fleetContender struct {
	name    string
	options func() policy.ClientOptions
}

var fleetContenders = []fleetContender{
	{"azcore", func() policy.ClientOptions { return policy.ClientOptions{} }},
	{"rr", func() policy.ClientOptions { return rrazure.ClientOptions() }},
	// rr-dir: the one-line wiring sharing each scope's not-before through
	// a directory store the run's members share (issue 37).
	{"rr-dir", func() policy.ClientOptions {
		s, err := readrecovery.DirScopeStore(os.Getenv(envFleetStoreDir))
		if err != nil {
			panic(err)
		}
		return rrazure.ClientOptions(readrecovery.WithScopeStore(s))
	}},
}

func fleetContenderNamed(name string) (fleetContender, bool) {
	for _, c := range fleetContenders {
		if c.name == name {
			return c, true
		}
	}
	return fleetContender{}, false
}

// fleetBlob is the name of member's copy of a checkpoint blob: each member
// reads blobs of its own, so that the proxy's ledger tells the members
// apart by path (it keeps no headers). The scope is the account's either way.
func fleetBlob(member int, name string) string { return fmt.Sprintf("m%d/%s", member, name) }

// fleetCheckpoint is member's pair of checkpoint blobs: the names, in the
// order a sequence reads them, and their bytes.
func fleetCheckpoint(member int) []checkpointBlob {
	return []checkpointBlob{
		{fleetBlob(member, "source.json"), fmt.Appendf(nil, `{"checkpoint":"source","rows":42,"member":%d}`, member)},
		{fleetBlob(member, "generated.json"), fmt.Appendf(nil, `{"checkpoint":"generated","fields":["id","name"],"member":%d}`, member)},
	}
}

// fleetSummary is the one JSON line a member prints.
type fleetSummary struct {
	Kind      string `json:"kind"` // "fleet-member": tells the line from the test binary's own
	Member    int    `json:"member"`
	Contender string `json:"contender"`
	Sequences int    `json:"sequences"`
	Completed int    `json:"completed"`
	// Start is when the member's sequences were let go, End when the last
	// of them ended: the host's wall clock, which all members share.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// LateMS is how long after the fleet's start instant the member
	// reached it; 0 when it waited for it.
	LateMS float64        `json:"late_ms"`
	Stops  map[string]int `json:"stops"`            // the Budgets' stop reasons ("none" for none)
	Waits  map[string]int `json:"waits"`            // the Budgets' wait triggers
	Errors map[string]int `json:"errors"`           // the first error of each failed sequence, shortened
	Failed []string       `json:"failed,omitempty"` // the first failed sequences' reports, in brief
}

func (s fleetSummary) String() string {
	return fmt.Sprintf("member %d (%s): completed %d/%d in %v (late %.0f ms)  stops %v  waits %v  errors %v",
		s.Member, s.Contender, s.Completed, s.Sequences, s.End.Sub(s.Start).Round(time.Millisecond), s.LateMS,
		s.Stops, s.Waits, s.Errors)
}

// TestFleetMember is not a test of its own: run by runFleet with
// envFleetProxy set, it is one process of the fleet.
func TestFleetMember(t *testing.T) {
	proxy := os.Getenv(envFleetProxy)
	if proxy == "" {
		t.Skip("a helper process of BenchmarkFleetCheckpoints and TestFleetHarness")
	}
	member, err := strconv.Atoi(os.Getenv(envFleetMember))
	if err != nil {
		t.Fatalf("%s: %v", envFleetMember, err)
	}
	n, err := strconv.Atoi(os.Getenv(envFleetSequences))
	if err != nil {
		t.Fatalf("%s: %v", envFleetSequences, err)
	}
	startNS, err := strconv.ParseInt(os.Getenv(envFleetStart), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", envFleetStart, err)
	}
	contender, ok := fleetContenderNamed(os.Getenv(envFleetContender))
	if !ok {
		t.Fatalf("%s=%q: no such contender", envFleetContender, os.Getenv(envFleetContender))
	}
	c := newBlobClient(t, proxy, contender.options())
	container := os.Getenv(envFleetContainer)
	blobs := fleetCheckpoint(member)

	// A bound on the run (each contender's own limits end it well before:
	// a Budget's total is 60 s).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	sum := fleetSummary{Kind: "fleet-member", Member: member, Contender: contender.name, Sequences: n,
		Stops: map[string]int{}, Waits: map[string]int{}, Errors: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			b := readrecovery.NewBudget(fmt.Sprintf("member %d checkpoint %d", member, i))
			sctx := readrecovery.WithBudget(ctx, b)
			<-gate
			failure := readCheckpoint(sctx, c, container, blobs)
			ok := failure == ""
			rep := b.Report()
			mu.Lock()
			defer mu.Unlock()
			if ok {
				sum.Completed++
			} else {
				sum.Errors[failure]++
				if len(sum.Failed) < 5 {
					sum.Failed = append(sum.Failed, briefReport(rep))
				}
			}
			stop := string(rep.Stop)
			if stop == "" {
				stop = "none"
			}
			sum.Stops[stop]++
			for _, w := range rep.WaitLog {
				sum.Waits[w.Trigger]++
			}
		})
	}
	start := time.Unix(0, startNS)
	if d := time.Until(start); d > 0 {
		time.Sleep(d)
	} else {
		sum.LateMS = float64(-d) / float64(time.Millisecond)
	}
	sum.Start = time.Now()
	close(gate)
	wg.Wait()
	sum.End = time.Now()
	line, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s\n", line)
}

// fleetRun is one run of the fleet: a contender, how many processes, the
// sequences each runs, and whether the proxy throttles (issue 27's bucket)
// or lets everything through (the harness's check).
type fleetRun struct {
	contender string
	procs     int
	sequences int // per process
	throttle  bool
	// lead is how far ahead of the members' start the parent sets the
	// instant they start together: time enough for every process to start.
	lead time.Duration
}

// fleet is a fleetRun's world: the rig and each member's blobs in it.
type fleet struct {
	fleetRun
	tb testing.TB
	r  *rig
}

// newFleet makes a rig for run (a proxy of its own, so a full bucket, and a
// container of its own) and seeds each member's blobs.
func newFleet(tb testing.TB, az *azurite, run fleetRun) *fleet {
	tb.Helper()
	if _, ok := fleetContenderNamed(run.contender); !ok {
		tb.Fatalf("no fleet contender %q", run.contender)
	}
	var r *rig
	if run.throttle {
		r = bucketRig(tb, az)
	} else {
		r = newRig(tb, az)
	}
	for m := 1; m <= run.procs; m++ {
		for _, b := range fleetCheckpoint(m) {
			r.seed(b.name, b.data)
		}
	}
	return &fleet{fleetRun: run, tb: tb, r: r}
}

// fleetResult is what a fleet run did: each member's summary and the
// proxy's counts.
type fleetResult struct {
	members   []fleetSummary // by member
	completed int
	wall      time.Duration // the first member's start to the last member's end
	server    serverCount
	// arrivals are the proxy's requests of each member (ledger order):
	// arrivals[m-1] for member m.
	arrivals [][]fleetArrival
}

// fleetArrival is one request of a member at the proxy.
type fleetArrival struct {
	at     time.Duration // after the first member's start
	method string
	status int
}

// run starts the members, waits for them all and gathers their lines and
// the proxy's ledger.
func (f *fleet) run() fleetResult {
	tb := f.tb
	tb.Helper()
	lead := f.lead
	if lead == 0 {
		lead = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now().Add(lead)
	storeDir := tb.TempDir() // the run's own directory store (rr-dir)
	res := fleetResult{members: make([]fleetSummary, f.procs)}
	errs := make([]error, f.procs)
	var wg sync.WaitGroup
	for i := range f.procs {
		member := i + 1
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFleetMember$", "-test.count=1", "-test.v=false")
			cmd.Env = append(os.Environ(),
				envFleetProxy+"="+f.r.proxyURL, envFleetContainer+"="+f.r.container,
				envFleetContender+"="+f.contender, envFleetSequences+"="+strconv.Itoa(f.sequences),
				envFleetMember+"="+strconv.Itoa(member), envFleetStart+"="+strconv.FormatInt(start.UnixNano(), 10),
				envFleetStoreDir+"="+storeDir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("member %d: %v\n%s\n%s", member, err, stdout, stderr.String())
				return
			}
			found := false
			sc := bufio.NewScanner(bytes.NewReader(stdout))
			for sc.Scan() {
				var s fleetSummary
				if json.Unmarshal(sc.Bytes(), &s) != nil || s.Kind != "fleet-member" {
					continue // the test binary's own PASS line
				}
				res.members[i], found = s, true
			}
			if !found || res.members[i].Member != member {
				errs[i] = fmt.Errorf("member %d printed no summary of its own:\n%s\n%s", member, stdout, stderr.String())
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}

	first, last := res.members[0].Start, res.members[0].End
	for _, s := range res.members {
		res.completed += s.Completed
		if s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
	}
	res.wall = last.Sub(first)
	res.server = countAtServer(f.r)
	res.arrivals = make([][]fleetArrival, f.procs)
	for _, q := range f.r.ledger() {
		var m int
		if _, err := fmt.Sscanf(strings.TrimPrefix(q.Path, f.r.prefix()), "m%d/", &m); err != nil || m < 1 || m > f.procs {
			tb.Fatalf("the proxy saw %s %s, no member's blob", q.Method, q.Path)
		}
		res.arrivals[m-1] = append(res.arrivals[m-1], fleetArrival{at: q.Arrived.Sub(first), method: q.Method, status: q.Status})
	}
	return res
}

// memberLine is what the proxy saw of one member: its requests and 429s,
// and its 2xx answers per second after the fleet's start, the pace the
// member settled at.
func memberLine(arrivals []fleetArrival) string {
	var throttled int
	var perSecond []int
	for _, a := range arrivals {
		if a.status == http.StatusTooManyRequests {
			throttled++
			continue
		}
		if a.status/100 != 2 {
			continue
		}
		s := max(int(a.at/time.Second), 0)
		for len(perSecond) <= s {
			perSecond = append(perSecond, 0)
		}
		perSecond[s]++
	}
	return fmt.Sprintf("at the proxy: requests %d, 429s %d, 2xx per second %v", len(arrivals), throttled, perSecond)
}

// log logs the run in one line, each member in one line of its own (its
// summary and what the proxy saw of it), and up to failures of the failed
// sequences' reports: a benchmark's log keeps only its first ten lines.
func (res fleetResult) log(tb testing.TB, name string, failures int) {
	tb.Helper()
	tb.Logf("%s: wall %v, completed %d, 429s %d, requests %d; the 429s after the first: %v",
		name, res.wall.Round(time.Millisecond), res.completed, res.server.throttled, res.server.requests, res.server.cycles)
	var failed []string
	for i, s := range res.members {
		tb.Logf("  %s; %s", s, memberLine(res.arrivals[i]))
		failed = append(failed, s.Failed...)
	}
	for _, f := range failed[:min(failures, len(failed))] {
		tb.Logf("  failed: %s", f)
	}
}

// BenchmarkFleetCheckpoints is issue 36's fleet: 160 checkpoint sequences
// against TokenBucket(20, 10) on one account, read by one process (160
// sequences) and by four (40 each), for azcore alone and for the one-line
// wiring (rrazure.ClientOptions()), without a store. One op is one fleet
// run on a fresh bucket; run it with -benchtime 1x. Metrics per op:
// wall-s (the first member's start to the last member's end), completed
// (of 160), 429s and requests (the proxy's ledger). Issue 36's target: 4
// processes within 1.3× one process's wall time, with at most ¼ of azcore
// alone's 429s. With TIMELINE_FLEET=path, the first four-process run of
// each contender writes what the proxy saw to path (fleettimeline_test.go).
func BenchmarkFleetCheckpoints(b *testing.B) {
	az := startAzurite(b)
	for _, c := range fleetContenders {
		for _, procs := range []int{1, 4} {
			b.Run(fmt.Sprintf("contender=%s/procs=%d", c.name, procs), func(b *testing.B) {
				run := fleetRun{contender: c.name, procs: procs, sequences: fleetSequences / procs, throttle: true}
				var wall time.Duration
				var completed, throttled, requests int
				for i := range b.N {
					b.StopTimer()
					f := newFleet(b, az, run)
					b.StartTimer()
					res := f.run()
					res.log(b, fmt.Sprintf("run %d", i+1), 1)
					if procs == 4 {
						if err := fleetTimeline.record(c.name, res); err != nil {
							b.Fatal(err)
						}
					}
					wall += res.wall
					completed += res.completed
					throttled += res.server.throttled
					requests += res.server.requests
				}
				n := float64(b.N)
				b.ReportMetric(wall.Seconds()/n, "wall-s")
				b.ReportMetric(float64(completed)/n, "completed")
				b.ReportMetric(float64(throttled)/n, "429s")
				b.ReportMetric(float64(requests)/n, "requests")
			})
		}
	}
}

// TestFleetHarness checks the fleet's harness with two members of four
// sequences each and no throttling rule: every sequence completes, and
// the proxy saw exactly two GETs per sequence, each answered 200, eight of
// each member; the run's samples (TIMELINE_FLEET) are the same eight lines
// of each member.
func TestFleetHarness(t *testing.T) {
	az := startAzurite(t)
	const procs, sequences = 2, 4
	for _, c := range fleetContenders {
		t.Run(c.name, func(t *testing.T) {
			res := newFleet(t, az, fleetRun{contender: c.name, procs: procs, sequences: sequences, lead: 500 * time.Millisecond}).run()
			res.log(t, c.name, len(res.members)*5)
			if res.completed != procs*sequences {
				t.Errorf("completed %d sequences, want %d", res.completed, procs*sequences)
			}
			for i, s := range res.members {
				if s.Member != i+1 || s.Contender != c.name || s.Sequences != sequences || s.Completed != sequences {
					t.Errorf("member %d's summary: member %d, contender %q, completed %d of %d; want member %d, %q, %d of %d",
						i+1, s.Member, s.Contender, s.Completed, s.Sequences, i+1, c.name, sequences, sequences)
				}
				if !s.End.After(s.Start) {
					t.Errorf("member %d: start %v, end %v", i+1, s.Start, s.End)
				}
				seen := map[string]int{}
				for _, a := range res.arrivals[i] {
					seen[fmt.Sprintf("%s %d", a.method, a.status)]++
				}
				if want := map[string]int{"GET 200": 2 * sequences}; !maps.Equal(seen, want) {
					t.Errorf("member %d at the proxy: %v, want %v", i+1, seen, want)
				}
			}
			if want := procs * sequences * 2; res.server.requests != want || res.server.throttled != 0 {
				t.Errorf("the proxy saw %d requests and %d 429s, want %d and 0", res.server.requests, res.server.throttled, want)
			}
			var samples strings.Builder
			writeFleetSamples(&samples, c.name, res.arrivals)
			lines := map[string]int{}
			for l := range strings.Lines(samples.String()) {
				f := strings.Split(strings.TrimSuffix(l, "\n"), ",")
				if len(f) != 4 || f[0] != c.name {
					t.Fatalf("sample %q", l)
				}
				lines["member "+f[1]+" status "+f[3]]++
			}
			if want := map[string]int{"member 1 status 200": 2 * sequences, "member 2 status 200": 2 * sequences}; !maps.Equal(lines, want) ||
				strings.Count(samples.String(), "\n") != res.server.requests {
				t.Errorf("samples %v (%d lines), want %v (the proxy's %d requests)", lines, strings.Count(samples.String(), "\n"), want, res.server.requests)
			}
		})
	}
}
