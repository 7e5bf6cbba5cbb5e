package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/require"
)

// prefixMem is the in-memory Store with ListPrefix (as the Blob store has
// it); memStore alone is a Store without it (the root's listing filtered).
type prefixMem struct{ *memStore }

func (p prefixMem) ListPrefix(_ context.Context, prefix string, limit int) ([]string, error) {
	if p.delay > 0 {
		time.Sleep(p.delay)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check("list", prefix); err != nil {
		return nil, err
	}
	var out []string
	for n := range p.objs {
		if strings.HasPrefix(n, prefix) && len(out) < limit {
			out = append(out, n)
		}
	}
	return out, nil
}

var _ store.PrefixLister = prefixMem{}

// shardedRun is one parallel run of the worker tests, on one of the
// stores: the local directory, the in-memory Store, and the in-memory
// Store with ListPrefix.
type shardedRun struct {
	kind string
	dir  string
	mem  *memStore
	st   Store
}

func newShardedRun(t testing.TB, kind string) *shardedRun {
	r := &shardedRun{kind: kind}
	switch kind {
	case "dir":
		r.dir = filepath.Join(t.TempDir(), "run")
		r.st = DirStore(r.dir)
	case "mem":
		r.mem = newMemStore()
		r.st = r.mem
	case "mem+prefix":
		r.mem = newMemStore()
		r.st = prefixMem{r.mem}
	}
	return r
}

// files returns every record of the run, by name, with its bytes.
func (r *shardedRun) files(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	if r.mem != nil {
		r.mem.mu.Lock()
		for n, b := range r.mem.objs {
			out[n] = string(b)
		}
		r.mem.mu.Unlock()
		return out
	}
	require.NoError(t, filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(r.dir, p)
		out[rel] = string(b)
		return err
	}))
	return out
}

// markers returns the shards (1-based) whose marker exists now.
func (r *shardedRun) markers(n int) []int {
	var out []int
	for k := 1; k <= n; k++ {
		name := record.ShardName(k) + "/" + record.MarkerName
		if r.mem != nil && r.mem.has(name) {
			out = append(out, k)
		}
		if r.dir != "" {
			if _, err := os.Stat(filepath.Join(r.dir, name)); err == nil {
				out = append(out, k)
			}
		}
	}
	return out
}

// sendLog is the base transport of the parallel worker tests: at each
// send it records the markers present (per shard) and the sends in
// flight, overall and per shard; then it waits delay and answers 201, or
// 429 with Retry-After: 60 for the paths in throttle (once each).
type sendLog struct {
	run   *shardedRun
	n     int
	shard func(id string) int
	delay time.Duration

	mu          sync.Mutex
	throttle    map[string]bool
	puts        map[string]int
	inFlight    int
	maxInFlight int
	perShard    map[int]int
	maxPerShard int
	maxMarkers  int
	problems    []string
	// onSend, when set, runs at each send (under mu) with the file ID.
	onSend func(id string)
	sends  int
}

func (l *sendLog) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	id := strings.TrimPrefix(req.URL.Path, "/files/")
	k := l.shard(id)
	present := l.run.markers(l.n)
	l.mu.Lock()
	l.sends++
	l.puts[id]++
	l.inFlight++
	l.perShard[k]++
	l.maxInFlight = max(l.maxInFlight, l.inFlight)
	l.maxPerShard = max(l.maxPerShard, l.perShard[k])
	l.maxMarkers = max(l.maxMarkers, len(present))
	own := false
	for _, m := range present {
		own = own || m == k
	}
	if !own {
		l.problems = append(l.problems, fmt.Sprintf("%s sent without its shard %d's marker (markers %v)", id, k, present))
	}
	if l.onSend != nil {
		l.onSend(id)
	}
	code := http.StatusCreated
	if l.throttle[id] {
		delete(l.throttle, id)
		code = http.StatusTooManyRequests
	}
	l.mu.Unlock()
	time.Sleep(l.delay)
	l.mu.Lock()
	l.inFlight--
	l.perShard[k]--
	l.mu.Unlock()
	h := http.Header{}
	if code == http.StatusTooManyRequests {
		h.Set("Retry-After", "60")
	}
	return &http.Response{StatusCode: code, Status: fmt.Sprint(code), Header: h, Body: http.NoBody, Request: req}, nil
}

// uploadOne uploads file id through rt with j and returns the outcome:
// "acked", a stop reason, or "error: …".
func uploadOne(rt http.RoundTripper, j *Journal, id string) string {
	b := readrecovery.NewBudget("up-" + id)
	ctx := WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://files.test/files/"+id, bytes.NewReader([]byte("content of "+id)))
	if err != nil {
		return "error: " + err.Error()
	}
	resp, err := rt.RoundTrip(req)
	var se *readrecovery.StopError
	switch {
	case err == nil && resp.StatusCode == http.StatusCreated:
		resp.Body.Close()
		return "acked"
	case err == nil:
		resp.Body.Close()
		return "status " + resp.Status
	case errors.As(err, &se):
		return string(se.Reason)
	}
	return "error: " + err.Error()
}

// parallel-shards: four goroutine workers (four Journals of one run
// created WithParallel(4)) upload 48 files, each worker taking every file
// in plan order from its own starting point, on the directory, the
// in-memory Store and the in-memory Store with ListPrefix. At every send
// the file's own shard's marker is present, at most 4 markers exist and
// never two sends of one shard are in flight; more than one send was in
// flight at once; every file is sent exactly once (48 acked, 144
// replay-refused), and the run verifies clean with 48 receipts.
func TestParallelWorkersEveryFileOnce(t *testing.T) {
	const files, workers, n = 48, 4, 4
	plan := manyFiles(files)
	for _, kind := range []string{"dir", "mem", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			run := newShardedRun(t, kind)
			first, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(n))
			if err != nil {
				t.Fatal(err)
			}
			log := &sendLog{run: run, n: n, shard: first.Shard, delay: 3 * time.Millisecond,
				throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}
			rt := readrecovery.New(log)
			hist := make([]map[string]int, workers)
			var wg sync.WaitGroup
			for w := range workers {
				j, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithPendingWait(20*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				hist[w] = map[string]int{}
				wg.Go(func() {
					for i := range plan {
						f := plan[(i+w*files/workers)%files]
						out := uploadOne(rt, j, f.ID)
						hist[w][out]++
						if strings.HasPrefix(out, "error") {
							t.Errorf("worker %d, %s: %s", w+1, f.ID, out)
						}
					}
				})
			}
			wg.Wait()
			total := map[string]int{}
			for _, h := range hist {
				for k, c := range h {
					total[k] += c
				}
			}
			if total["acked"] != files || total[string(readrecovery.StopReplayRefused)] != files*(workers-1) || len(total) != 2 {
				t.Errorf("outcomes %v, want %d acked and %d replay-refused only", total, files, files*(workers-1))
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.puts) != files {
				t.Errorf("%d distinct files sent, want %d", len(log.puts), files)
			}
			for id, c := range log.puts {
				if c != 1 {
					t.Errorf("%s sent %d times, want once", id, c)
				}
			}
			for _, p := range log.problems {
				t.Error(p)
			}
			if log.maxMarkers > n || log.maxPerShard != 1 || log.maxInFlight < 2 {
				t.Errorf("at the sends: up to %d markers (want ≤ %d), %d sends of one shard at once (want 1), %d sends in flight at once (want ≥ 2)",
					log.maxMarkers, n, log.maxPerShard, log.maxInFlight)
			}
			t.Logf("%s: up to %d sends in flight, %d markers at once", kind, log.maxInFlight, log.maxMarkers)
			sum, err := InspectStore(context.Background(), run.st)
			if err != nil || sum.Receipts != files || len(sum.Findings) != 0 {
				t.Errorf("Inspect = %+v, %v; want %d receipts and no finding", sum, err, files)
			}
		})
	}
}

// parallel-shards, restriction shared by all workers: four workers of a
// run WithParallel(4), each uploading the files of its own shard, through
// a server that answers the third file of shard 2 with 429 (Retry-After:
// 60). The store's operation log orders everything: every send whose
// claim (the marker's create) came after the 429's backoff entry was
// created is a failure — there is none; at most n−1 = 3 sends reach the
// server after the entry (requests claimed and checked before it); every
// worker's next file after that is refused journal-restricted before any
// network access, and the run is waiting for 60 s.
func TestParallel429BlocksEveryWorker(t *testing.T) {
	const files, n = 64, 4
	plan := manyFiles(files)
	run := newShardedRun(t, "mem+prefix")
	first, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(n))
	if err != nil {
		t.Fatal(err)
	}
	byShard := make([][]string, n+1)
	for _, f := range plan {
		k := first.Shard(f.ID)
		byShard[k] = append(byShard[k], f.ID)
	}
	throttled := byShard[2][2]
	log := &sendLog{run: run, n: n, shard: first.Shard, delay: 2 * time.Millisecond,
		throttle: map[string]bool{throttled: true}, puts: map[string]int{}, perShard: map[int]int{}}
	type send struct {
		id          string
		at, claimed int // positions in the store's operation log
	}
	var sends []send
	log.onSend = func(id string) {
		k := first.Shard(id)
		run.mem.mu.Lock()
		claimed := -1
		for i, op := range run.mem.ops {
			if op == "create "+record.ShardName(k)+"/"+record.MarkerName {
				claimed = i
			}
		}
		sends = append(sends, send{id, len(run.mem.ops), claimed})
		run.mem.mu.Unlock()
	}
	rt := readrecovery.New(log)
	outs := make([]map[string]int, n+1)
	var wg sync.WaitGroup
	for k := 1; k <= n; k++ {
		j, err := OpenStore(context.Background(), run.st, WithPlan(plan))
		if err != nil {
			t.Fatal(err)
		}
		outs[k] = map[string]int{}
		wg.Go(func() {
			for _, id := range byShard[k] {
				outs[k][uploadOne(rt, j, id)]++
			}
		})
	}
	wg.Wait()

	run.mem.mu.Lock()
	entry := -1
	for i, op := range run.mem.ops {
		if strings.HasPrefix(op, "create shard-02/backoff-0001.json") {
			entry = i
		}
	}
	run.mem.mu.Unlock()
	if entry < 0 {
		t.Fatalf("no backoff entry in shard-02")
	}
	after := 0
	for _, s := range sends {
		if s.at > entry {
			after++
			if s.claimed > entry {
				t.Errorf("%s sent with a claim made after the 429's entry was durable (claim at op %d, entry at op %d)", s.id, s.claimed, entry)
			}
		}
	}
	if after > n-1 {
		t.Errorf("%d sends after the 429's entry, want at most %d (those claimed before it)", after, n-1)
	}
	total := map[string]int{}
	for k := 1; k <= n; k++ {
		for o, c := range outs[k] {
			total[o] += c
		}
	}
	// Every file is acked, or the throttled one (its 429 returned: the 60
	// s wait is beyond the sequence's), or refused before sending.
	if total["acked"]+total[string(readrecovery.StopJournalRestricted)]+total["status 429"] != files || total["status 429"] != 1 || total["acked"] != len(sends)-1 {
		t.Errorf("outcomes %v over %d sends, want %d files acked or journal-restricted, one 429", total, len(sends), files)
	}
	if total[string(readrecovery.StopJournalRestricted)] < n {
		t.Errorf("outcomes %v: want every worker stopped by the restriction", total)
	}
	if st := first.Status(time.Now()); st.State != Waiting {
		// Status reads nothing: Admit first.
		_ = first.Admit(context.Background(), time.Now())
	}
	if st := first.Status(time.Now()); st.State != Waiting || !strings.HasPrefix(st.Reason, "shard-02/backoff-0001.json") {
		t.Errorf("status %+v, want waiting on shard-02/backoff-0001.json", st)
	}
	t.Logf("%d sends, %d after the 429's entry; outcomes %v", len(sends), after, total)
}

// parallel-shards: the check under the claim reads every shard. Worker A
// (a file of one shard) is admitted; then worker B records a 429 with a
// 60 s delay in another shard; A's Begin, claiming its own shard's
// marker after B's entry is durable, is refused waiting — naming B's
// shard's entry — and A's marker is gone again (nothing sent).
func TestParallelClaimSeesOtherShards429(t *testing.T) {
	for _, kind := range []string{"dir", "mem", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			run := newShardedRun(t, kind)
			plan := manyFiles(16)
			clk := newFakeClock(t0)
			a, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(4), withClock(clk))
			require.NoError(t, err)
			b, err := OpenStore(context.Background(), run.st, WithPlan(plan), withClock(clk))
			require.NoError(t, err)
			var fa, fb string
			for _, f := range plan {
				switch {
				case fa == "" && a.Shard(f.ID) == 1:
					fa = f.ID
				case fb == "" && a.Shard(f.ID) == 3:
					fb = f.ID
				}
			}
			ctxA, ctxB := WithUpload(context.Background(), fa), WithUpload(context.Background(), fb)
			require.NoError(t, a.Admit(ctxA, t0))
			record429(t, b, ctxB, putReq(t), secs(60), timing(t0, 60))
			err = a.Begin(ctxA, putReq(t))
			var re *RestrictedError
			require.ErrorAs(t, err, &re)
			require.Equal(t, Waiting, re.Status.State, re.Status.Reason)
			require.Equal(t, t0.Unix()+60, re.Status.NotBeforeUTC)
			require.True(t, strings.HasPrefix(re.Status.Reason, "shard-03/backoff-0001.json"), re.Status.Reason)
			require.Empty(t, run.markers(4), "the refused claim's marker is removed")
			st := a.Status(t0.Add(59 * time.Second))
			require.Equal(t, Waiting, st.State)
			require.NoError(t, a.Admit(ctxA, t0.Add(61*time.Second)))
		})
	}
}

// parallel-dead-worker (R83): a shard whose worker keeps sending (a new
// marker each request) is never judged dead, and neither is one marker
// held for long: worker A keeps a request of shard 1 in flight at t0,
// t0+20 s and t0+40 s (a new marker each time); worker B's Begins of
// shard 2 at t0+1, t0+21, t0+41, t0+62 and t0+70 (A's last marker 30 s
// old, more than the pending wait) all go. Once A dies, B's next Begin is
// refused at once, at the same clock reading.
func TestParallelLiveMarkersNeverStale(t *testing.T) {
	run := newShardedRun(t, "mem+prefix")
	plan := manyFiles(40)
	clk := newFakeClock(t0)
	a, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(2), withClock(clk))
	require.NoError(t, err)
	b, err := OpenStore(context.Background(), run.st, WithPlan(plan), withClock(clk))
	require.NoError(t, err)
	var ofA, ofB []string
	for _, f := range plan {
		if a.Shard(f.ID) == 1 {
			ofA = append(ofA, f.ID)
		} else {
			ofB = append(ofB, f.ID)
		}
	}
	complete := func(j *Journal, id string) {
		ctx := WithUpload(context.Background(), id)
		require.NoError(t, j.Complete(ctx, putReq(t), ok201("ok")))
	}
	begin := func(j *Journal, id string) error {
		return j.Begin(WithUpload(context.Background(), id), putReq(t))
	}
	for i, at := range []int64{0, 20, 40} {
		clk.Set(t0.Add(time.Duration(at) * time.Second))
		if i > 0 {
			complete(a, ofA[i-1])
		}
		require.NoError(t, begin(a, ofA[i]))
		clk.Set(t0.Add(time.Duration(at+1) * time.Second))
		require.NoError(t, begin(b, ofB[i]), "at t0+%d s: A's marker is %d s old", at+1, 1)
		complete(b, ofB[i])
	}
	clk.Set(t0.Add(62 * time.Second)) // A's marker of t0+40 is 22 s old
	require.NoError(t, begin(b, ofB[3]))
	complete(b, ofB[3])
	clk.Set(t0.Add(70 * time.Second)) // 30 s old, and held: in flight
	require.NoError(t, begin(b, ofB[4]))
	complete(b, ofB[4])
	kill(a)
	err = begin(b, ofB[5])
	require.ErrorIs(t, err, ErrPending)
	require.Contains(t, err.Error(), "shard-01/pending-request.json: "+runread.PendingProblem)
}

// parallel-shards: a pending review in another shard (the unknown
// restriction of a dead worker's lost response) blocks this shard's claim
// as the entries do: worker A is admitted; then an operator resolves a
// dead worker's marker of shard 3; A's Begin is refused waiting until the
// review time + 30 s, naming shard-03/review-0001.json.
func TestParallelClaimSeesOtherShardsReview(t *testing.T) {
	run := newShardedRun(t, "mem+prefix")
	plan := manyFiles(16)
	clk := newFakeClock(t0)
	open := opener4(t, run.st, plan, clk)
	a, dead, op := open(), open(), open()
	fs := filesOfShards(plan, 4)
	require.NoError(t, dead.Begin(WithUpload(context.Background(), fs[3]), putReq(t)))
	clk.Set(t0.Add(5 * time.Second))
	ctxA := WithUpload(context.Background(), fs[1])
	require.NoError(t, a.Admit(ctxA, clk.Now()))
	kill(dead)
	_, err := op.ReviewPendingMarker(context.Background(), record.MarkerRef(3), "killed", 0)
	require.NoError(t, err)
	err = a.Begin(ctxA, putReq(t))
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, Waiting, re.Status.State, re.Status.Reason)
	require.Equal(t, t0.Unix()+5+30, re.Status.NotBeforeUTC)
	require.True(t, strings.HasPrefix(re.Status.Reason, "shard-03/review-0001.json: pending review"), re.Status.Reason)
	require.Empty(t, run.markers(4))
}

// parallel-shards: one Journal of a parallel run has one request in flight
// per shard at once (each under its shard's marker), and a request that
// names no file (a GET, a mutation without WithUpload) goes to the shard
// of its URL digest; Complete finds each request's shard again.
func TestParallelOneJournalManyInFlight(t *testing.T) {
	run := newShardedRun(t, "dir")
	plan := manyFiles(16)
	j, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(4), withClock(newFakeClock(t0)))
	require.NoError(t, err)
	fs := filesOfShards(plan, 4)
	get := getReq(t)
	gk := record.ShardIndex(get.URLDigest, 4)
	var ctxs []context.Context
	var want []int
	for k := 1; k <= 4; k++ {
		if k == gk {
			continue
		}
		ctx := WithUpload(context.Background(), fs[k])
		require.NoError(t, j.Begin(ctx, putReq(t)), "shard %d", k)
		ctxs, want = append(ctxs, ctx), append(want, k)
	}
	require.NoError(t, j.Begin(context.Background(), get), "the GET in shard %d", gk)
	require.Equal(t, []int{1, 2, 3, 4}, run.markers(4), "four requests in flight, one per shard")
	require.NoError(t, j.Complete(context.Background(), get, readrecovery.JournalOutcome{StatusCode: 200}))
	for _, ctx := range ctxs {
		require.NoError(t, j.Complete(ctx, putReq(t), ok201("ok")))
	}
	require.Empty(t, run.markers(4))
	sum, err := InspectStore(context.Background(), run.st)
	require.NoError(t, err)
	require.Empty(t, sum.Findings)
	require.Equal(t, 3, sum.Receipts)
	require.Len(t, want, 3)
}

// parallel-shards: Admit of a request of a file decides from what the
// process read last — no store operation when that allows it (the Begin
// that follows reads its shard and the others under its claim) — and
// reads every shard again when that refuses, so that a restriction seen
// before never blocks for longer than it lasts, and one recorded since is
// found (the claim check finds it too).
func TestParallelAdmitReadsOnlyWhenItRefuses(t *testing.T) {
	m := newMemStore()
	plan := manyFiles(16)
	clk := newFakeClock(t0)
	a, err := OpenStore(context.Background(), prefixMem{m}, WithPlan(plan), WithParallel(4), withClock(clk))
	require.NoError(t, err)
	b, err := OpenStore(context.Background(), prefixMem{m}, WithPlan(plan), withClock(clk))
	require.NoError(t, err)
	fs := filesOfShards(plan, 4)
	ops := func(f func()) []string {
		m.mu.Lock()
		m.ops = nil
		m.mu.Unlock()
		f()
		m.mu.Lock()
		defer m.mu.Unlock()
		return append([]string(nil), m.ops...)
	}
	ctxA := WithUpload(context.Background(), fs[1])
	require.Empty(t, ops(func() { require.NoError(t, a.Admit(ctxA, clk.Now())) }), "allowed from what it read")
	record429(t, b, WithUpload(context.Background(), fs[2]), putReq(t), secs(20), timing(t0, 20))
	require.Empty(t, ops(func() { require.NoError(t, a.Admit(ctxA, clk.Now())) }), "not read yet: the claim check will")
	var re *RestrictedError
	require.ErrorAs(t, a.Begin(ctxA, putReq(t)), &re, "found under the claim")
	require.Equal(t, Waiting, re.Status.State)
	got := ops(func() {
		err := a.Admit(ctxA, clk.Now())
		require.ErrorAs(t, err, &re)
		require.Equal(t, Waiting, re.Status.State)
	})
	require.Len(t, filter(got, "list "), 4, "refused: every shard read again: %v", got)
	clk.Set(t0.Add(21 * time.Second))
	require.NoError(t, a.Admit(ctxA, clk.Now()), "elapsed")
}

func filter(ss []string, prefix string) []string {
	var out []string
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// opener4 opens workers of the four-shard run in st, on clk.
func opener4(t *testing.T, st Store, plan []PlannedFile, clk *fakeClock) func() *Journal {
	return func() *Journal {
		t.Helper()
		j, err := OpenStore(context.Background(), st, WithPlan(plan), WithParallel(4), withClock(clk))
		require.NoError(t, err)
		return j
	}
}
