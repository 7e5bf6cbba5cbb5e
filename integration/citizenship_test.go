package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// Issue 27's new user: azblob against Azurite behind
// `readrecovery fakeserver --upstream <azurite> --token-bucket 20,10`, that
// is the proxy with one rule on every route, Throttle(RetryAfterRemaining())
// with TokenBucket(20, 10) kept per storage account. Each run gets a proxy
// (so a full bucket) and a container of its own.
const (
	bucketRate  = 20 // tokens per second
	bucketBurst = 10
)

// bucketRig is a rig whose proxy throttles as the command line above does.
func bucketRig(t testing.TB, az *azurite) *rig {
	t.Helper()
	r := newRig(t, az)
	r.script.Add(fakeserver.RouteAny, fakeserver.Throttle(fakeserver.RetryAfterRemaining()),
		fakeserver.TokenBucket(bucketRate, bucketBurst))
	return r
}

// serverCount is what the proxy's ledger holds for the rig's container.
type serverCount struct {
	requests, throttled int
	// cycles is, for each 429 after the first, its arrival after the first
	// request and how many requests passed since the 429 before it: how the
	// sender met the bucket again.
	cycles []string
	// firstWindow is how many 429s arrived inside the first 429's
	// window (firstRetryAfter after it), the first one included: the
	// requests sent, or in flight, before their sender heard of it.
	firstWindow int
}

// firstRetryAfter is the Retry-After of the bucket rig's 429s: the time
// to its bucket's next token (1/bucketRate at most) rounded up to whole
// seconds (RetryAfterRemaining): 1 s.
var firstRetryAfter = time.Duration(math.Ceil(1.0/bucketRate)) * time.Second

func countAtServer(r *rig) serverCount { return countLedger(r.ledger()) }

// countLedger counts a ledger of the rig's container, in arrival order.
func countLedger(ledger []fakeserver.Request) serverCount {
	var c serverCount
	var first, first429 time.Time
	passed := 0
	for _, q := range ledger {
		if c.requests == 0 {
			first = q.Arrived
		}
		c.requests++
		if q.Status != http.StatusTooManyRequests {
			passed++
			continue
		}
		if c.throttled == 0 {
			first429 = q.Arrived
		}
		if q.Arrived.Before(first429.Add(firstRetryAfter)) {
			c.firstWindow++
		}
		if c.throttled > 0 && len(c.cycles) < 12 {
			c.cycles = append(c.cycles, fmt.Sprintf("+%v after %d passed", q.Arrived.Sub(first).Round(time.Millisecond), passed))
		}
		c.throttled++
		passed = 0
	}
	return c
}

// checkpointRow is one contender's run of the checkpoint scenario.
type checkpointRow struct {
	name      string
	completed int // sequences whose two reads returned the blobs' bytes
	server    serverCount
	elapsed   time.Duration
	stops     map[string]int // the Budgets' stop reasons ("" counted as "none")
	triggers  map[string]int // the Budgets' wait triggers
	errs      map[string]int // the first error of each failed sequence, shortened
	failed    []string       // the reports of the failed sequences, in brief
}

func (c checkpointRow) String() string {
	return fmt.Sprintf("%-22s completed %2d/%d  429s %3d  requests %3d  in %v  stops %v  waits %v  errors %v",
		c.name, c.completed, checkpointSequences, c.server.throttled, c.server.requests,
		c.elapsed.Round(time.Millisecond), c.stops, c.triggers, c.errs)
}

const checkpointSequences = 40

// runCheckpoints runs the 40 checkpoint sequences at once through a fresh
// bucket rig, each with a Budget of its own: a GET of the source, then of
// the generated definition, bodies read whole.
func runCheckpoints(t *testing.T, az *azurite, name string, o policy.ClientOptions) checkpointRow {
	t.Helper()
	r := bucketRig(t, az)
	source := []byte(`{"checkpoint":"source","rows":42}`)
	generated := []byte(`{"checkpoint":"generated","fields":["id","name"]}`)
	r.seed("source.json", source)
	r.seed("generated.json", generated)
	c := r.client(o)

	// A bound on the run (each contender's own limits end it well before).
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	row := checkpointRow{name: name, stops: map[string]int{}, triggers: map[string]int{}, errs: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	start := time.Now()
	for i := range checkpointSequences {
		wg.Go(func() {
			b := readrecovery.NewBudget(fmt.Sprintf("checkpoint %d", i))
			sctx := readrecovery.WithBudget(ctx, b)
			<-gate
			failure := readCheckpoint(sctx, c, r.container, []checkpointBlob{{"source.json", source}, {"generated.json", generated}})
			ok := failure == ""
			rep := b.Report()
			mu.Lock()
			defer mu.Unlock()
			if ok {
				row.completed++
			} else {
				row.errs[failure]++
				row.failed = append(row.failed, briefReport(rep))
			}
			stop := string(rep.Stop)
			if stop == "" {
				stop = "none"
			}
			row.stops[stop]++
			for _, w := range rep.WaitLog {
				row.triggers[w.Trigger]++
			}
		})
	}
	close(gate)
	wg.Wait()
	row.elapsed = time.Since(start)
	row.server = countAtServer(r)
	return row
}

// checkpointBlob is one blob of a checkpoint sequence: its name and bytes.
type checkpointBlob struct {
	name string
	data []byte
}

// readCheckpoint reads blobs in order, each whole, and returns why the
// sequence failed (its first error, shortened, or a blob with other
// bytes), "" when every blob came back as written.
func readCheckpoint(ctx context.Context, c *azblob.Client, container string, blobs []checkpointBlob) string {
	for _, want := range blobs {
		got, err := download(ctx, c, container, want.name)
		if err != nil {
			return shortError(err)
		}
		if !bytes.Equal(got, want.data) {
			return want.name + ": other bytes"
		}
	}
	return ""
}

// briefReport is a failed sequence's report in one line: its stop, its
// window and each wait (trigger, re-send or not, planned and actual).
func briefReport(rep readrecovery.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: requests %d stop %q", rep.Sequence, rep.Requests, rep.Stop)
	if w := rep.Window; w != nil {
		fmt.Fprintf(&b, " window{%s retry-after %v length %v joined %d}", w.Trigger, w.RetryAfter, w.Length.Round(time.Millisecond), w.Joined)
	}
	for _, w := range rep.WaitLog {
		fmt.Fprintf(&b, " wait{%s %s resend=%v planned %v actual %v}", w.Trigger, w.Method, w.Resend,
			w.Planned.Round(time.Millisecond), w.Actual.Round(time.Millisecond))
	}
	if rep.StopDetail != "" {
		fmt.Fprintf(&b, " detail %q", rep.StopDetail)
	}
	return b.String()
}

// shortError names an error by its status and code (or its kind), never
// its text whole: the counts group alike failures.
func shortError(err error) string {
	var se *readrecovery.StopError
	if errors.As(err, &se) {
		return "stopped: " + string(se.Reason)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// Issue 27's target for the checkpoint scenario: with the one-line wiring,
// at least 38 of the 40 sequences finish, with at most half of the 429s
// azcore alone draws from the server.
func TestCheckpointsUnderTokenBucket(t *testing.T) {
	az := startAzurite(t)

	alone := runCheckpoints(t, az, "azcore alone", policy.ClientOptions{})
	t.Logf("%s", alone)
	wired := runCheckpoints(t, az, "rrazure.ClientOptions()", rrazure.ClientOptions())
	t.Logf("%s", wired)
	t.Logf("rrazure.ClientOptions(): the 429s after the first at the server: %v", wired.server.cycles)
	for _, f := range wired.failed {
		t.Logf("failed: %s", f)
	}

	if alone.server.throttled == 0 {
		t.Fatalf("azcore alone met no 429 from the bucket (%d requests): the scenario does not throttle", alone.server.requests)
	}
	if wired.completed < 38 {
		t.Errorf("the one-line wiring completed %d of %d checkpoint sequences, want at least 38 (azcore alone: %d)",
			wired.completed, checkpointSequences, alone.completed)
	}
	if 2*wired.server.throttled > alone.server.throttled {
		t.Errorf("the one-line wiring drew %d 429s from the server, want at most half of azcore alone's %d",
			wired.server.throttled, alone.server.throttled)
	}
}

// downloadRow is one contender's run of the parallel download.
type downloadRow struct {
	name    string
	err     error
	intact  bool
	server  serverCount
	elapsed time.Duration
	report  readrecovery.Report
}

func (d downloadRow) String() string {
	out := "failed: " + fmt.Sprint(d.err)
	if d.err == nil {
		out = "intact"
		if !d.intact {
			out = "other bytes"
		}
	}
	return fmt.Sprintf("%-22s %s  429s %d  requests %d  in %v  report: requests %d waits %d stop %q %s",
		d.name, out, d.server.throttled, d.server.requests, d.elapsed.Round(time.Millisecond),
		d.report.Requests, d.report.Waits, d.report.Stop, waitTriggers(d.report))
}

func waitTriggers(rep readrecovery.Report) string {
	n := map[string]int{}
	for _, w := range rep.WaitLog {
		n[w.Trigger]++
	}
	parts := make([]string, 0, len(n))
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n[k]))
	}
	return "waits by trigger [" + strings.Join(parts, " ") + "]"
}

// runDownload downloads an 8 MiB blob in 32 ranges of 256 KiB, 16 at a
// time, under one Budget, through a fresh bucket rig.
func runDownload(t *testing.T, az *azurite, name string, data []byte, o policy.ClientOptions) downloadRow {
	t.Helper()
	r := bucketRig(t, az)
	r.seed("model.bin", data)
	c := r.client(o)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := readrecovery.NewBudget("parallel download")
	ctx = readrecovery.WithBudget(ctx, b)
	got := make([]byte, len(data))
	start := time.Now()
	n, err := c.DownloadBuffer(ctx, r.container, "model.bin", got, &blob.DownloadBufferOptions{BlockSize: 256 << 10, Concurrency: 16})
	row := downloadRow{name: name, err: err, elapsed: time.Since(start), report: b.Report()}
	row.intact = err == nil && n == int64(len(data)) && bytes.Equal(got, data)
	row.server = countAtServer(r)
	return row
}

// Issue 27's target for the parallel download: with the one-line wiring
// the 8 MiB blob arrives intact.
func TestParallelDownloadUnderTokenBucket(t *testing.T) {
	az := startAzurite(t)
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)

	alone := runDownload(t, az, "azcore alone", data, policy.ClientOptions{})
	t.Logf("%s", alone)
	wired := runDownload(t, az, "rrazure.ClientOptions()", data, rrazure.ClientOptions())
	t.Logf("%s", wired)
	if !wired.intact {
		t.Logf("rrazure.ClientOptions(): the 429s after the first at the server: %v", wired.server.cycles)
		t.Logf("report: %s", briefReport(wired.report))
	}

	if alone.server.throttled == 0 {
		t.Fatalf("azcore alone met no 429 from the bucket (%d requests): the scenario does not throttle", alone.server.requests)
	}
	if wired.err != nil || !wired.intact {
		t.Fatalf("the one-line wiring's download: err %v, intact %v; want the blob's 8 MiB", wired.err, wired.intact)
	}
}

// TestCountLedger: the counts of a ledger, a step table of arrivals: the
// 429s inside the first 429's window (firstRetryAfter after it, the first
// included) are firstWindow; one exactly at its end is outside.
func TestCountLedger(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int, status int) fakeserver.Request {
		return fakeserver.Request{Arrived: t0.Add(time.Duration(ms) * time.Millisecond), Status: status}
	}
	ledger := []fakeserver.Request{
		at(0, 200), at(10, 200), at(20, 429), at(21, 429), at(30, 200), at(500, 429),
		at(1019, 429), at(1020, 429), at(1100, 200), at(3000, 429),
	}
	c := countLedger(ledger)
	if c.requests != 10 || c.throttled != 6 || c.firstWindow != 4 {
		t.Fatalf("requests %d, 429s %d, in the first window %d; want 10, 6, 4", c.requests, c.throttled, c.firstWindow)
	}
	want := []string{"+21ms after 0 passed", "+500ms after 1 passed", "+1.019s after 0 passed", "+1.02s after 0 passed", "+3s after 1 passed"}
	if !slices.Equal(c.cycles, want) {
		t.Fatalf("cycles %v, want %v", c.cycles, want)
	}
}
