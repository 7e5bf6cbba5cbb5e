package journal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nextLoop is one worker that only loops on Next: each file it is handed
// is uploaded through rt with j; it returns the files in the order it got
// them, each with its outcome, and the error that ended the loop.
func nextLoop(rt http.RoundTripper, j *Journal) (got []string, outcomes map[string]string, end error) {
	outcomes = map[string]string{}
	for {
		f, err := j.Next(context.Background(), NewApproval)
		if err != nil {
			return got, outcomes, err
		}
		got = append(got, f.ID)
		outcomes[f.ID] = uploadOne(rt, j, f.ID)
	}
}

// next-hands-out-work (R86): four workers that only loop on Next, on a run
// WithParallel(4) — four Journals of the run (as four processes), or one
// Journal shared by four goroutines — on the directory and the in-memory
// Store with ListPrefix. Every planned file is handed out exactly once
// and sent exactly once, under its shard's marker; each worker ends with
// ErrNoMoreFiles; more than one send was in flight at once and never two
// of one shard; the run verifies clean with one receipt per file.
func TestNextEveryFileOnce(t *testing.T) {
	const files = 48
	plan := manyFiles(files)
	for _, kind := range []string{"dir", "mem+prefix"} {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", kind, shared), func(t *testing.T) {
				r := newShardedRun(t, kind)
				open := func() *Journal {
					j, err := OpenStore(context.Background(), r.st, WithPlan(plan), WithParallel(4))
					require.NoError(t, err)
					return j
				}
				first := open()
				log := &sendLog{run: r, n: 4, shard: first.Shard, delay: 5 * time.Millisecond,
					throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}
				rt := readrecovery.New(log)
				var mu sync.Mutex
				handed := map[string]int{}
				outcomes := map[string]string{}
				var wg sync.WaitGroup
				for w := range 4 {
					j := first
					if !shared && w > 0 {
						j = open()
					}
					wg.Go(func() {
						got, outs, end := nextLoop(rt, j)
						assert.ErrorIs(t, end, ErrNoMoreFiles, "worker %d", w)
						mu.Lock()
						defer mu.Unlock()
						for _, id := range got {
							handed[id]++
						}
						for id, o := range outs {
							outcomes[id] = o
						}
					})
				}
				wg.Wait()
				require.Len(t, handed, files)
				for _, f := range plan {
					assert.Equal(t, 1, handed[f.ID], "%s handed out", f.ID)
					assert.Equal(t, "acked", outcomes[f.ID], f.ID)
					assert.Equal(t, 1, log.puts[f.ID], "%s sent", f.ID)
				}
				assert.Equal(t, files, log.sends)
				assert.Empty(t, log.problems)
				assert.Equal(t, 1, log.maxPerShard, "one send per shard at a time")
				assert.Greater(t, log.maxInFlight, 1, "the shards were sent at the same time")
				assert.Empty(t, r.markers(4), "no marker left")
				c, err := open().RecordedPlan(time.Now())
				require.NoError(t, err)
				assert.Equal(t, files, c.Count(FileAcked))
				if r.dir != "" {
					sum, err := inspectDir(r.dir)
					require.NoError(t, err)
					assert.Empty(t, sum.Findings)
					assert.Equal(t, files, sum.Receipts)
				}
			})
		}
	}
}

// Next's claim is the shard's marker, written before Next returns: it
// names the file (method CLAIM) and the worker's host and pid. The
// claim's request adopts it (one marker, sent under it, cleared by the
// receipt); Release gives an unsent file back, so that the next Next
// hands it out again; a file that is acked, unknown or not approved is
// never handed out, and Next without a plan is an error.
func TestNextClaimIsTheMarker(t *testing.T) {
	plan := []PlannedFile{{ID: "a.bin"}}
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, WithPlan(plan))
	require.NoError(t, err)

	_, err = j.Next(context.Background(), NoNewApproval)
	require.ErrorIs(t, err, ErrNoMoreFiles, "a never-attempted file needs a new approval")
	assert.NoFileExists(t, filepath.Join(dir, record.MarkerName))

	f, err := j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	assert.Equal(t, PlannedFile{ID: "a.bin"}, f)
	data, err := os.ReadFile(filepath.Join(dir, record.MarkerName))
	require.NoError(t, err)
	m, ok := record.ParseMarker(data)
	require.True(t, ok, "%s", data)
	host, _ := os.Hostname()
	assert.Equal(t, record.MarkerFile{BackoffVersion: record.BackoffVersion, Method: record.ClaimMethod, FileDigest: record.FileDigest("a.bin"),
		BegunAtUTC: m.BegunAtUTC, Host: host, PID: os.Getpid()}, m)
	assert.Equal(t, Unresolved, reopen(t, dir, time.Now()).Status(time.Now()).State, "a claim is a request in flight")

	require.NoError(t, j.Release(f))
	assert.NoFileExists(t, filepath.Join(dir, record.MarkerName))
	require.NoError(t, j.Release(f), "a second Release does nothing")

	f, err = j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	assert.Equal(t, "a.bin", f.ID, "a released file is handed out again")
	srv := &sendLog{run: &shardedRun{dir: dir}, n: 0, shard: func(string) int { return 0 },
		throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}
	var atSend []byte
	srv.onSend = func(string) { atSend, _ = os.ReadFile(filepath.Join(dir, record.MarkerName)) }
	assert.Equal(t, "acked", uploadOne(readrecovery.New(srv), j, f.ID))
	assert.Contains(t, string(atSend), `"method":"`+record.ClaimMethod+`"`, "sent under the claim's marker")
	assert.NoFileExists(t, filepath.Join(dir, record.MarkerName))
	assert.Equal(t, []string{"plan.json", receiptName(record.FileDigest("a.bin")), "run.json"}, names(t, dir))
	require.NoError(t, j.Release(f), "Release after the upload began does nothing")
	assert.Equal(t, []string{"plan.json", receiptName(record.FileDigest("a.bin")), "run.json"}, names(t, dir))

	_, err = j.Next(context.Background(), NewApproval)
	require.ErrorIs(t, err, ErrNoMoreFiles, "an acked file is never handed out")

	bare, err := Open(dir)
	require.NoError(t, err)
	_, err = bare.Next(context.Background(), NewApproval)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoMoreFiles)
	assert.Contains(t, err.Error(), "without WithPlan")
}

// Next refuses what the run forbids: a restriction recorded in another
// shard is a *RestrictedError, not a file and not ErrNoMoreFiles; and a
// claim whose request is then refused under it (the restriction came
// between Next and Begin) leaves no marker.
func TestNextRestricted(t *testing.T) {
	plan := manyFiles(16)
	clk := newFakeClock(time.Now())
	r := newShardedRun(t, "mem+prefix")
	j, err := OpenStore(context.Background(), r.st, WithPlan(plan), WithParallel(4), withClock(clk))
	require.NoError(t, err)
	f, err := j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	assert.Equal(t, []int{j.Shard(f.ID)}, r.markers(4))

	other, err := OpenStore(context.Background(), r.st, WithPlan(plan), WithParallel(4), withClock(clk))
	require.NoError(t, err)
	var g string
	for _, p := range plan {
		if other.Shard(p.ID) != j.Shard(f.ID) {
			g = p.ID
			break
		}
	}
	ctx := WithUpload(context.Background(), g)
	require.NoError(t, other.Begin(ctx, putReq(t)))
	_, err = other.Backoff(ctx, putReq(t), out429("r"), secs(60), timing(clk.Now(), 60))
	require.NoError(t, err)

	assert.Equal(t, "journal-restricted", uploadOne(readrecovery.New(&sendLog{run: r, n: 4, shard: j.Shard,
		throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}), j, f.ID))
	assert.Empty(t, r.markers(4), "the refused claim's marker is gone")
	_, err = j.Next(context.Background(), NewApproval)
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, Waiting, re.Status.State)
	assert.NotErrorIs(t, err, ErrNoMoreFiles)
}

// Environment of a Next worker process (TestNextWorkerProcess).
const (
	envNextDir  = "RR_NEXT_WORKER_DIR"
	envNextURL  = "RR_NEXT_WORKER_URL"
	envNextPlan = "RR_NEXT_WORKER_PLAN" // the plan's IDs, comma-separated
	envNextKill = "RR_NEXT_WORKER_KILL"
)

// TestNextWorkerProcess is not a test of its own: run by the multi-process
// Next tests, it is one worker process of a run WithParallel(4) that only
// loops on Next, uploading each file through readrecovery to the parent's
// server and printing "got ID" for each file it is handed, then "end" and
// the error that ended the loop. With envNextKill "claim" it kills itself
// (SIGKILL) right after its first Next, before any send; with "begun", right
// after its upload's Begin (its begun head written), before the send.
func TestNextWorkerProcess(t *testing.T) {
	dir := os.Getenv(envNextDir)
	if dir == "" {
		t.Skip("a helper process of the multi-process Next tests")
	}
	var plan []PlannedFile
	for _, id := range strings.Split(os.Getenv(envNextPlan), ",") {
		plan = append(plan, PlannedFile{ID: id})
	}
	j, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	rt := readrecovery.New(http.DefaultTransport)
	base := os.Getenv(envNextURL)
	for {
		f, err := j.Next(context.Background(), NewApproval)
		if err != nil {
			fmt.Printf("end %v\n", errors.Is(err, ErrNoMoreFiles))
			return
		}
		fmt.Printf("got %s\n", f.ID)
		if kill := os.Getenv(envNextKill); kill != "" {
			if kill == "begun" {
				require.NoError(t, j.Begin(WithUpload(context.Background(), f.ID), putReq(t)))
			}
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Kill() // SIGKILL
			}
			time.Sleep(time.Minute)
		}
		b := readrecovery.NewBudget("w-" + f.ID)
		ctx := WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), f.ID)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/files/"+f.ID, strings.NewReader("content of "+f.ID))
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			fmt.Printf("error %s %v\n", f.ID, err)
			continue
		}
		resp.Body.Close()
	}
}

// nextProcess runs one Next worker process on dir and returns its lines.
// kill is envNextKill's ("": none).
func nextProcess(t *testing.T, dir, url string, plan []PlannedFile, kill string) ([]string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestNextWorkerProcess$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), envNextDir+"="+dir, envNextURL+"="+url,
		envNextPlan+"="+strings.Join(ids(plan), ","), envNextKill+"="+kill)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "got ") || strings.HasPrefix(l, "end ") || strings.HasPrefix(l, "error ") {
			lines = append(lines, l)
		}
	}
	if err != nil {
		return lines, fmt.Errorf("%w\n%s\n%s", err, stdout, stderr.String())
	}
	return lines, nil
}

// putCounter is the multi-process tests' server: it counts the PUTs of
// each path and answers 201.
type putCounter struct {
	mu    sync.Mutex
	puts  map[string]int
	delay time.Duration // before each answer
}

func (s *putCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	time.Sleep(s.delay)
	s.mu.Lock()
	if r.Method == http.MethodPut {
		s.puts[strings.TrimPrefix(r.URL.Path, "/files/")]++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// next-hands-out-work (R86) across processes: four worker processes that
// only loop on Next on one directory run WithParallel(4). Every file is
// handed out to exactly one of them and sent exactly once; each ends with
// ErrNoMoreFiles; the run verifies clean with one receipt per file.
func TestNextFourProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	const files = 40
	srv := &putCounter{puts: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Open(dir, WithPlan(manyFiles(files)), WithParallel(4))
	require.NoError(t, err)
	outs := make([][]string, 4)
	var wg sync.WaitGroup
	for w := range outs {
		wg.Go(func() {
			lines, err := nextProcess(t, dir, ts.URL, manyFiles(files), "")
			assert.NoError(t, err)
			outs[w] = lines
		})
	}
	wg.Wait()
	handed := map[string]int{}
	per := make([]int, len(outs))
	for w, lines := range outs {
		per[w] = len(lines) - 1
		require.NotEmpty(t, lines, "worker %d", w+1)
		assert.Equal(t, "end true", lines[len(lines)-1], "worker %d ends with ErrNoMoreFiles", w+1)
		for _, l := range lines {
			if id, ok := strings.CutPrefix(l, "got "); ok {
				handed[id]++
			}
			assert.False(t, strings.HasPrefix(l, "error "), "worker %d: %s", w+1, l)
		}
	}
	t.Logf("files handed out per worker process: %v", per)
	for _, f := range manyFiles(files) {
		assert.Equal(t, 1, handed[f.ID], "%s handed out", f.ID)
		assert.Equal(t, 1, srv.puts[f.ID], "%s sent", f.ID)
	}
	assert.Len(t, srv.puts, files)
	sum, err := inspectDir(dir)
	require.NoError(t, err)
	assert.Empty(t, sum.Findings)
	assert.Equal(t, files, sum.Receipts)
}

// A claim whose marker cannot be removed (Release, the store's delete
// failing) is a persistence failure: Release returns it, the marker stays
// and the run is unresolved for this Journal; nothing is handed out.
func TestNextReleaseFailureIsPersistenceFailure(t *testing.T) {
	st := newMemStore()
	j := openMem(t, st, t0)
	f, err := j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	st.mu.Lock()
	st.fail = func(op, name string) error {
		if op == "remove" && name == record.MarkerName {
			return errors.New("mem: 503 Server Busy")
		}
		return nil
	}
	st.mu.Unlock()
	err = j.Release(f)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the claim's marker could not be removed")
	assert.True(t, st.has(record.MarkerName), "the marker stays")
	stt := j.Status(t0)
	assert.Equal(t, Unresolved, stt.State)
	assert.Contains(t, stt.Reason, "persistence failure")
	_, err = j.Next(context.Background(), NewApproval)
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
}

// Next's cursor (R112: it does not re-decide the files it passed) never
// hides a file that becomes eligible again: here a.bin met 429 (unknown),
// b.bin and c.bin were acked, Next ends; a reupload review of a.bin, a
// record after the cursor, makes Next hand a.bin out again, under a new
// approval only, and a second Journal that reads other workers' records
// sees the same.
func TestNextCursorSeesReviews(t *testing.T) {
	clk := newFakeClock(t0)
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, withClock(clk), WithPlan(plan3))
	require.NoError(t, err)
	other, err := Open(dir, withClock(clk), WithPlan(plan3))
	require.NoError(t, err)
	next := func(j *Journal, a Approval) string {
		f, err := j.Next(context.Background(), a)
		if errors.Is(err, ErrNoMoreFiles) {
			return "none"
		}
		require.NoError(t, err)
		return f.ID
	}
	require.Equal(t, "a.bin", next(j, NewApproval))
	record429(t, j, WithUpload(context.Background(), "a.bin"), putReq(t), secs(1), timing(t0, 1))
	clk.Set(t0.Add(2 * time.Second))
	for _, id := range []string{"b.bin", "c.bin"} {
		require.Equal(t, id, next(j, NewApproval))
		ctx := WithUpload(context.Background(), id)
		require.NoError(t, j.Begin(ctx, putReq(t)))
		require.NoError(t, j.Complete(ctx, putReq(t), ok201(id)))
	}
	require.Equal(t, "none", next(j, NewApproval))
	require.Equal(t, "none", next(other, NewApproval))
	_, err = other.Review(context.Background(), "a.bin", DecisionReupload, "resend")
	require.NoError(t, err)
	require.Equal(t, "a.bin", next(j, NewApproval), "the review came after the cursor")
	require.Equal(t, "none", next(other, NoNewApproval), "a reupload needs a new approval")
	require.NoError(t, j.Release(PlannedFile{ID: "a.bin"}))
	require.Equal(t, "a.bin", next(other, NewApproval))
}
