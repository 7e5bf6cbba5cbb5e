package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// Issue 38's kill trials on a Blob-backed run (Azurite): four blobworker
// processes loop on journal.Next (-next-loop) over a WithParallel(4) run
// of 200 files, each pausing 0–200 ms ("reading the file") between Next
// and its upload; the test SIGKILLs them and restarts each killed one at
// once, as a Kubernetes Job would. The proxy's ledger is the server's:
// every PUT of a data blob it received.
const (
	blobTrialFiles   = 200
	blobTrialWorkers = 4
	blobTrialPause   = 200 * time.Millisecond
)

// blobTrialKills is how many kills a trial makes: RR_KILL_TRIALS when set
// (issue 38's full count is 10), else def.
func blobTrialKills(t *testing.T, def int) int {
	t.Helper()
	if s := os.Getenv("RR_KILL_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("RR_KILL_TRIALS: %v", err)
		}
		return n
	}
	return def
}

// heldUpload is a data PUT the holding upstream keeps unanswered until its
// worker dies: a request in flight.
type heldUpload struct {
	file   string
	pid    int
	stored bool          // forwarded to Azurite first: the server has the file
	gone   chan struct{} // closed when the worker's connection ended
}

// holdingUpstream is the proxy's way to Azurite in the trials: while
// armed, it holds the next data PUTs of files not sent before, forwarding
// each first or not, at random, and hands them to the test.
type holdingUpstream struct {
	base http.RoundTripper
	data string // path prefix of the data blobs

	mu          sync.Mutex
	hold, after int
	seen        int
	sent        map[string]bool
	rng         *rand.Rand
	held        chan heldUpload
}

func (h *holdingUpstream) arm(n, after int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold, h.after = n, after
}

func (h *holdingUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !strings.HasPrefix(req.URL.Path, h.data) {
		return h.base.RoundTrip(req)
	}
	file := path.Base(req.URL.Path)
	h.mu.Lock()
	hold := h.hold > 0 && h.seen >= h.after && !h.sent[file]
	h.seen++
	h.sent[file] = true
	stored := false
	if hold {
		h.hold--
		stored = h.rng.IntN(2) == 0
	}
	h.mu.Unlock()
	if !hold {
		return h.base.RoundTrip(req)
	}
	if stored {
		resp, err := h.base.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			stored = false
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	pid, _ := strconv.Atoi(req.Header.Get("X-Worker-Pid"))
	x := heldUpload{file: file, pid: pid, stored: stored, gone: make(chan struct{})}
	h.held <- x
	<-req.Context().Done()
	close(x.gone)
	return nil, req.Context().Err()
}

// blobProc is one blobworker process of a trial fleet.
type blobProc struct {
	slot   int
	cmd    *exec.Cmd
	pid    int
	stderr *syncBuffer
	killed bool          // by the test (under blobFleet.mu)
	dead   chan struct{} // closed once the process is reaped
}

// syncBuffer collects a process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitLines returns the times at which p said that Next waits.
func (p *blobProc) waitLines(t *testing.T) []time.Time {
	var out []time.Time
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(l, "Next waits") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, at)
	}
	return out
}

// blobEvent is a line a worker printed, or its exit.
type blobEvent struct {
	p    *blobProc
	line workerLine
	at   time.Time
	exit bool
	err  error
}

// blobFleet is the trial's worker processes: one per slot, a killed one
// restarted at once in its slot.
type blobFleet struct {
	t      *testing.T
	args   []string
	events chan blobEvent
	// onGot, when set, sees each handout (in the event loop).
	onGot func(e blobEvent)
	// onDeath, when set, sees each killed worker's death (in the event loop).
	onDeath func(p *blobProc, at time.Time)

	mu              sync.Mutex
	procs           []*blobProc
	live            map[int]*blobProc
	restarts, ended int
	normalExits     []time.Time
	unexpected      []string
	ends, errs      []string
	refusals        []string
	handouts        int
	doneAt          time.Time
}

func newBlobFleet(t *testing.T, bin string, args ...string) *blobFleet {
	return &blobFleet{t: t, args: append([]string{bin}, args...), events: make(chan blobEvent, 64), live: map[int]*blobProc{}}
}

func (f *blobFleet) start(slot int) {
	cmd := exec.Command(f.args[0], append(slices.Clone(f.args[1:]), "-worker", strconv.Itoa(slot+1))...)
	p := &blobProc{slot: slot, cmd: cmd, stderr: &syncBuffer{}, dead: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		// Maybe not the test's goroutine (a restart): no FailNow; the
		// slot never ends, and the test's wait for the batch fails.
		f.t.Errorf("start a worker: %v", err)
		return
	}
	p.pid = cmd.Process.Pid
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.live[slot] = p
	f.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l workerLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = workerLine{Outcome: "unparsed", Detail: sc.Text()}
			}
			f.events <- blobEvent{p: p, line: l, at: time.Now()}
		}
		err := cmd.Wait()
		close(p.dead)
		f.events <- blobEvent{p: p, exit: true, err: err, at: time.Now()}
	}()
}

func (f *blobFleet) kill(p *blobProc) {
	f.mu.Lock()
	p.killed = true
	f.mu.Unlock()
	_ = p.cmd.Process.Kill()
}

func (f *blobFleet) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.live {
		p.killed = true
		_ = p.cmd.Process.Kill()
	}
}

func (f *blobFleet) proc(pid int) *blobProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		if p.pid == pid {
			return p
		}
	}
	return nil
}

// loop applies the events until every slot has ended, then closes done:
// a killed worker is restarted at once; any other exit is noted.
func (f *blobFleet) loop(done chan<- struct{}) {
	for e := range f.events {
		if !e.exit {
			f.mu.Lock()
			switch e.line.Outcome {
			case "got":
				f.handouts++
			case "end":
				f.ends = append(f.ends, e.line.Detail)
			case "refused":
				f.refusals = append(f.refusals, e.line.File+": "+e.line.Detail)
			case "error", "unparsed":
				f.errs = append(f.errs, e.line.File+": "+e.line.Detail)
			}
			f.mu.Unlock()
			if e.line.Outcome == "got" && f.onGot != nil {
				f.onGot(e)
			}
			continue
		}
		f.mu.Lock()
		delete(f.live, e.p.slot)
		killed := e.p.killed
		f.mu.Unlock()
		var ee *exec.ExitError
		switch {
		case killed && errors.As(e.err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			if f.onDeath != nil {
				f.onDeath(e.p, e.at)
			}
			f.mu.Lock()
			f.restarts++
			f.mu.Unlock()
			f.start(e.p.slot)
			continue
		case e.err == nil:
			f.mu.Lock()
			f.normalExits = append(f.normalExits, e.at)
		default:
			f.mu.Lock()
			f.unexpected = append(f.unexpected, fmt.Sprintf("pid %d: %v\n%s", e.p.pid, e.err, e.p.stderr.String()))
		}
		f.ended++
		end := f.ended == blobTrialWorkers
		if end {
			f.doneAt = e.at
		}
		f.mu.Unlock()
		if end {
			close(done)
			return
		}
	}
}

// blobTrialRig is a trial's world: Azurite, the proxy with the holding
// upstream, the run (created WithParallel(4)) and its fleet's arguments.
type blobTrialRig struct {
	r      *rig
	hold   *holdingUpstream
	st     *blobjournal.Store
	bin    string
	prefix string
	args   []string
}

func newBlobTrialRig(t *testing.T, name string, seed uint64) *blobTrialRig {
	az := startAzurite(t)
	x := &blobTrialRig{prefix: name + "/", bin: buildWorker(t)}
	x.hold = &holdingUpstream{sent: map[string]bool{}, rng: rand.New(rand.NewPCG(seed, 38)), held: make(chan heldUpload, blobTrialWorkers)}
	x.r = newRig(t, az, withUpstream(func(base http.RoundTripper) http.RoundTripper {
		x.hold.base = base
		return x.hold
	}))
	x.hold.data = x.r.blobPath(x.prefix + "data/")
	x.st = blobjournal.New(storeClient(t, az.URL, x.r.container), x.prefix+"journal/")
	if _, err := journal.OpenStore(context.Background(), x.st, journal.WithPlan(workerPlan(blobTrialFiles)), journal.WithParallel(4)); err != nil {
		t.Fatal(err)
	}
	x.args = []string{"-store", az.URL, "-proxy", x.r.proxyURL, "-container", x.r.container, "-files", strconv.Itoa(blobTrialFiles),
		"-parallel", "4", "-prefix", x.prefix + "journal/", "-data", x.prefix + "data/", "-next-loop", blobTrialPause.String(), "-max-run", "10m"}
	return x
}

// sent returns the data PUTs the proxy received, per file, and the
// files Azurite holds.
func (x *blobTrialRig) sent(t *testing.T) (puts map[string][]time.Time, stored map[string]bool) {
	puts = map[string][]time.Time{}
	for _, q := range dataPuts(x.r, x.prefix+"data/") {
		f := path.Base(q.Path)
		puts[f] = append(puts[f], q.Arrived)
	}
	stored = map[string]bool{}
	pager := x.r.direct.NewListBlobsFlatPager(x.r.container, nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Errorf("list the data blobs: %v", err) // maybe not the test's goroutine: no FailNow
			return puts, stored
		}
		for _, b := range page.Segment.BlobItems {
			if name := *b.Name; strings.HasPrefix(name, x.prefix+"data/") {
				stored[path.Base(name)] = true
			}
		}
	}
	return puts, stored
}

// blobDurations sorts ds and returns min, median and max.
func blobDurations(ds []time.Duration) (lo, med, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}

// Issue 38, target A, on Blob Storage (docs/policy.md: dead-claim-heals):
// SIGKILLs at random moments of a claimed file's "reading" pause, before
// its upload began; each killed worker restarted at once. Every file
// reaches the server exactly once (the proxy's ledger) and is in Azurite,
// no operator command is run, no live worker exits before the batch is
// done or says that Next waits, each killed claim's file is handed out
// again within one lease (leaseBound) of its worker's death, no upload is
// refused, and the run ends clear, verifying clean with one receipt per
// file and no review. 4 kills by default (RR_KILL_TRIALS=10 for issue
// 38's full count).
func TestBlobKillTrialsBeforeUpload(t *testing.T) {
	t.Parallel() // mostly waits for leases
	kills := blobTrialKills(t, 4)
	seed := uint64(time.Now().UnixNano())
	x := newBlobTrialRig(t, "ktb", seed)
	fl := newBlobFleet(t, x.bin, x.args...)
	defer fl.stopAll()
	rng := rand.New(rand.NewPCG(seed, 1))
	type kill struct {
		file           string
		pause, after   time.Duration
		died, rehanded time.Time
		sentBefore     int
	}
	var mu sync.Mutex
	var done []*kill
	byPID := map[int]*kill{}
	waiting := map[string]*kill{}
	var at []int
	for i := range kills {
		span := 176 / kills
		at = append(at, 8+i*span+rng.IntN(max(span-4, 1)))
	}
	handouts := 0
	fl.onGot = func(e blobEvent) {
		mu.Lock()
		defer mu.Unlock()
		handouts++
		if k := waiting[e.line.File]; k != nil {
			k.rehanded = e.at
			delete(waiting, e.line.File)
		}
		ms, _ := strconv.Atoi(e.line.Detail)
		pause := time.Duration(ms) * time.Millisecond
		if len(done) < kills && handouts >= at[len(done)] && pause >= 20*time.Millisecond && byPID[e.p.pid] == nil {
			k := &kill{file: e.line.File, pause: pause, after: time.Duration(rng.Int64N(int64(pause - 10*time.Millisecond)))}
			done = append(done, k)
			byPID[e.p.pid] = k
			p := e.p
			time.AfterFunc(k.after-time.Since(e.at), func() { fl.kill(p) })
		}
	}
	fl.onDeath = func(p *blobProc, died time.Time) {
		mu.Lock()
		defer mu.Unlock()
		k := byPID[p.pid]
		if k == nil {
			return
		}
		k.died = died
		puts, _ := x.sent(t)
		k.sentBefore = len(puts[k.file])
		waiting[k.file] = k
	}
	finished := make(chan struct{})
	start := time.Now()
	for slot := range blobTrialWorkers {
		fl.start(slot)
	}
	go fl.loop(finished)
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the batch is not done after 5 min: %d handouts, %d kills", fl.handouts, len(done))
	}
	wall := time.Since(start)

	puts, stored := x.sent(t)
	twice := 0
	for _, f := range workerPlan(blobTrialFiles) {
		if n := len(puts[f.ID]); n != 1 {
			t.Errorf("%s reached the server %d times, want once", f.ID, n)
			twice++
		}
		if !stored[f.ID] {
			t.Errorf("%s is not in Azurite", f.ID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(done) != kills || fl.restarts != kills {
		t.Errorf("%d kills, %d restarts; want %d", len(done), fl.restarts, kills)
	}
	if len(fl.unexpected) > 0 || len(fl.errs) > 0 {
		t.Errorf("a worker exited or failed unexpectedly: %v %v", fl.unexpected, fl.errs)
	}
	if len(fl.ends) != blobTrialWorkers || slices.ContainsFunc(fl.ends, func(s string) bool { return s != "no-more-files" }) {
		t.Errorf("the workers ended: %v; want each with ErrNoMoreFiles", fl.ends)
	}
	var rehand, toDone []time.Duration
	for i, k := range done {
		if k.died.IsZero() || k.rehanded.IsZero() {
			t.Errorf("kill %d (%s): died %v, handed out again %v", i+1, k.file, k.died, k.rehanded)
			continue
		}
		if k.sentBefore != 0 {
			t.Errorf("kill %d: %s was sent before its worker died (killed %v into a %v pause)", i+1, k.file, k.after, k.pause)
		}
		d := k.rehanded.Sub(k.died)
		rehand = append(rehand, d)
		if d > leaseBound {
			t.Errorf("kill %d: %s handed out again %v after its worker's death, more than one lease", i+1, k.file, d)
		}
		toDone = append(toDone, fl.doneAt.Sub(k.died))
	}
	j, err := journal.OpenStore(context.Background(), x.st, journal.Existing())
	if err != nil {
		t.Fatal(err)
	}
	if s := j.Status(time.Now()); s.State != journal.Clear || s.Files[journal.FileAcked] != blobTrialFiles {
		t.Errorf("the run: %s %q, files %v; want clear, every file acked", s.State, s.Reason, s.Files)
	}
	sum, err := journal.InspectStore(context.Background(), x.st)
	if err != nil || len(sum.Findings) != 0 || sum.Receipts != blobTrialFiles || sum.Reviews != 0 {
		t.Errorf("the run: %+v, %v; want %d receipts, no review, no finding", sum, err, blobTrialFiles)
	}
	lo, med, hi := blobDurations(rehand)
	firstToDone, _, lastToDone := blobDurations(toDone)
	waits := 0
	for _, p := range fl.procs {
		waits += len(p.waitLines(t))
	}
	if len(fl.refusals) > 0 {
		t.Errorf("%d uploads refused %v; want none (a dead claim misjudged: TestDeadClaimJudgedWithItsOwnProbe)", len(fl.refusals), fl.refusals)
	}
	if waits > 0 {
		// No request was ever in flight when its worker died: nothing to
		// wait out (a claim healed between a scan's probe and its read was
		// judged a dead worker's request: TestDeadClaimHealedBetweenProbeAndRead).
		t.Errorf("%d 'Next waits' lines; want none", waits)
		for _, p := range fl.procs {
			for _, l := range strings.Split(p.stderr.String(), "\n") {
				if strings.Contains(l, "Next waits") {
					t.Log(l)
				}
			}
		}
	}
	t.Logf("Blob, killed before the upload began: %d kills, %d restarts, 0 operator commands, %d files sent twice; "+
		"re-handout after the kill min/median/max %v/%v/%v (one lease: 15 s); last kill to done %v (first kill to done %v); "+
		"%d handouts, %d refusals %v, %d 'Next waits' lines; wall %v",
		len(done), fl.restarts, twice, lo.Round(time.Millisecond), med.Round(time.Millisecond), hi.Round(time.Millisecond),
		firstToDone.Round(time.Millisecond), lastToDone.Round(time.Millisecond), fl.handouts, len(fl.refusals), fl.refusals, waits, wall.Round(time.Millisecond))
}

// blobRoundSizes splits kills into rounds of at most 3 (one shard of the 4
// is left to a live worker): 3 → [3], 10 → [3 3 2 2].
func blobRoundSizes(kills int) []int {
	n := (kills + 2) / 3
	out := make([]int, n)
	for i := range kills {
		out[i%n]++
	}
	return out
}

// blobTrialRound is one round of kills after the upload began, and the
// operator's commands that resolved it.
type blobTrialRound struct {
	held                []heldUpload
	died                []time.Time
	firstDied, lastDied time.Time
	deadSeen            time.Time // `rrjournal status` first showed every marker dead
	reviewed            time.Time
	notBefore           time.Time
	commands            int
	reuploads           []string
}

// Issue 38, target B, on Blob Storage (docs/policy.md: dead-upload-waits,
// pending-review): SIGKILLs while a worker's upload is in flight (the
// proxy holds the PUT unanswered, having forwarded it to Azurite or not,
// at random), each killed worker restarted at once. The kills come in
// rounds of up to three (workers whose requests the proxy holds together,
// each killed at a random moment 0–200 ms later), so that a round's
// leases and reviews share their waits. Once `rrjournal status` shows the
// markers dead (their leases expired, within leaseBound) the run is
// unresolved: no worker exits, nothing is sent until the reviews'
// not-before, and each worker says why it waits at most once per round.
// The operator's documented sequence, per killed worker, through the
// rrjournal command: `review RUN --pending` (with --marker when several
// markers are dead), then `--file ID --decision reupload` only for a file
// Azurite does not have. No restart after that: the fleet finishes. Every
// file is in Azurite; a file is sent twice only when its reupload
// decision says so; the run holds a receipt per file but those left
// unknown and a review per command. 3 kills by default, in one round
// (~60 s); RR_KILL_TRIALS=10 for issue 38's full count (4 rounds).
func TestBlobKillTrialsAfterUpload(t *testing.T) {
	t.Parallel() // mostly waits for leases and the reviews' 30 s
	kills := blobTrialKills(t, 3)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	x := newBlobTrialRig(t, "kta", seed)
	rrjBin := buildRRJournal(t)
	cs := "DefaultEndpointsProtocol=http;AccountName=" + azuriteAccount + ";AccountKey=" + azuriteKey + ";BlobEndpoint=" + x.r.az.URL + "/" + azuriteAccount + ";"
	runArg := x.r.container + "/" + x.prefix + "journal"
	rrj := func(args ...string) (int, string, string) {
		cmd := exec.Command(rrjBin, args...)
		cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+cs)
		code, out, errb := runProcess(t, cmd)
		return code, out.String(), errb.String()
	}
	fl := newBlobFleet(t, x.bin, x.args...)
	defer fl.stopAll()
	finished := make(chan struct{})
	start := time.Now()
	for slot := range blobTrialWorkers {
		fl.start(slot)
	}
	go fl.loop(finished)

	sizes := blobRoundSizes(kills)
	var rounds []*blobTrialRound
	for i, size := range sizes {
		after := (i+1)*blobTrialFiles/(len(sizes)+1) - 10 + rng.IntN(20)
		x.hold.arm(size, after)
		r := &blobTrialRound{}
		// The workers send again once the last round's reviews' wait is over.
		deadline := time.Now().Add(60 * time.Second)
		if len(rounds) > 0 {
			deadline = rounds[len(rounds)-1].notBefore.Add(60 * time.Second)
		}
		for range size {
			select {
			case h := <-x.hold.held:
				r.held = append(r.held, h)
			case <-time.After(time.Until(deadline)):
				t.Fatalf("round %d: %d of %d requests held by %s", i+1, len(r.held), size, deadline.Format(time.StampMilli))
			}
		}
		r.died = make([]time.Time, size)
		var wg sync.WaitGroup
		for n, h := range r.held {
			p := fl.proc(h.pid)
			if p == nil {
				t.Fatalf("round %d: no worker of pid %d", i+1, h.pid)
			}
			d := time.Duration(rng.Int64N(int64(blobTrialPause)))
			wg.Go(func() {
				time.Sleep(d)
				fl.kill(p)
				<-h.gone
				<-p.dead
				r.died[n] = time.Now()
			})
		}
		wg.Wait()
		r.firstDied, r.lastDied = slices.MinFunc(r.died, time.Time.Compare), slices.MaxFunc(r.died, time.Time.Compare)
		rounds = append(rounds, r)

		// The operator: `rrjournal status` names the dead markers, once
		// their leases expired.
		byDigest := map[string]bool{}
		for _, h := range r.held {
			byDigest[journal.PlannedFile{ID: h.file}.Digest()] = true
		}
		var dead []string
		for {
			code, out, errs := rrj("status", runArg)
			var st struct {
				FileBatch struct{ Shards []journal.ShardView } `json:"file_batch"`
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status: exit %d, %q %q", code, out, errs)
			}
			dead = dead[:0]
			for k, v := range st.FileBatch.Shards {
				if v.Marker == "dead" {
					if v.Method != "PUT" || !byDigest[v.FileDigest] {
						t.Errorf("round %d: shard %d's dead marker: %+v; want a killed worker's PUT", i+1, k+1, v)
					}
					dead = append(dead, fmt.Sprintf("shard-%02d/pending-request.json", k+1))
				}
			}
			if len(dead) == size {
				if code != 4 {
					t.Errorf("round %d: status with %d dead markers: exit %d, want 4 (unresolved)", i+1, size, code)
				}
				break
			}
			if time.Since(r.lastDied) > leaseBound {
				t.Fatalf("round %d: %d of %d markers dead %v after the kills: %s", i+1, len(dead), size, time.Since(r.lastDied), out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		r.deadSeen = time.Now()
		for _, m := range dead {
			args := []string{"review", runArg, "--pending", "--note", fmt.Sprintf("round %d: a worker killed mid-upload", i+1)}
			if len(dead) > 1 {
				args = append(args, "--marker", m)
			}
			code, out, errs := rrj(args...)
			r.commands++
			if code != 3 {
				t.Fatalf("round %d: %v: exit %d, %q %q", i+1, args, code, out, errs)
			}
			sec, err := strconv.ParseInt(strings.TrimSpace(out[strings.LastIndex(out, " ")+1:]), 10, 64)
			if err != nil {
				t.Fatalf("round %d: review: %q", i+1, out)
			}
			if at := time.Unix(sec, 0); at.After(r.notBefore) {
				r.notBefore = at
			}
		}
		// The operator asks Azurite which files it has.
		_, stored := x.sent(t)
		for _, h := range r.held {
			if stored[h.file] != h.stored {
				t.Errorf("round %d: %s in Azurite %v, forwarded %v", i+1, h.file, stored[h.file], h.stored)
			}
			if stored[h.file] {
				continue
			}
			code, out, errs := rrj("review", runArg, "--file", h.file, "--decision", "reupload", "--note", "not in the container")
			r.commands++
			if code != 0 {
				t.Fatalf("round %d: reupload review of %s: exit %d, %q %q", i+1, h.file, code, out, errs)
			}
			r.reuploads = append(r.reuploads, h.file)
		}
		r.reviewed = time.Now()
		t.Logf("round %d: %d kills %v apart, markers dead %v after the last, %d commands, reuploads %v, the run waits until %s",
			i+1, size, r.lastDied.Sub(r.firstDied).Round(time.Millisecond), r.deadSeen.Sub(r.lastDied).Round(100*time.Millisecond),
			r.commands, r.reuploads, r.notBefore.Format(time.TimeOnly))
	}
	select {
	case <-finished:
	case <-time.After(3 * time.Minute):
		t.Fatal("the batch is not done 3 min after the last review, with no restart")
	}
	wall := time.Since(start)

	puts, stored := x.sent(t)
	reupload := map[string]bool{}
	commands, killed := 0, 0
	for i, r := range rounds {
		commands += r.commands
		killed += len(r.held)
		for _, f := range r.reuploads {
			reupload[f] = true
		}
		// Nothing is sent from the markers' death (and the requests then
		// in flight) until the reviews' not-before.
		for f, ats := range puts {
			for _, at := range ats {
				if at.After(r.deadSeen.Add(time.Second)) && at.Before(r.notBefore) {
					t.Errorf("round %d: %s sent at %s, while the run was unresolved or waiting (until %s)", i+1, f, at.Format(time.StampMilli), r.notBefore.Format(time.StampMilli))
				}
			}
		}
		for _, p := range fl.procs {
			n := 0
			for _, at := range p.waitLines(t) {
				if !at.Before(r.firstDied) && !at.After(r.notBefore) {
					n++
				}
			}
			if n > 1 {
				t.Errorf("round %d: pid %d said %d times why it waits; want once", i+1, p.pid, n)
			}
		}
	}
	var byDecision, otherwise []string
	for _, f := range workerPlan(blobTrialFiles) {
		if !stored[f.ID] {
			t.Errorf("%s is not in Azurite", f.ID)
		}
		switch n := len(puts[f.ID]); {
		case n == 2 && reupload[f.ID]:
			byDecision = append(byDecision, f.ID)
		case n != 1:
			otherwise = append(otherwise, fmt.Sprintf("%s:%d", f.ID, n))
		}
	}
	if len(otherwise) > 0 || len(byDecision) != len(reupload) {
		t.Errorf("files sent twice: %v by a reupload decision (of %d), %v otherwise", byDecision, len(reupload), otherwise)
	}
	if killed != kills || fl.restarts != kills {
		t.Errorf("%d kills, %d restarts; want %d", killed, fl.restarts, kills)
	}
	if len(fl.unexpected) > 0 || len(fl.errs) > 0 {
		t.Errorf("a worker exited or failed unexpectedly: %v %v", fl.unexpected, fl.errs)
	}
	if len(fl.ends) != blobTrialWorkers || slices.ContainsFunc(fl.ends, func(s string) bool { return s != "no-more-files" }) {
		t.Errorf("the workers ended: %v; want each with ErrNoMoreFiles", fl.ends)
	}
	last := rounds[len(rounds)-1]
	for _, at := range fl.normalExits {
		if at.Before(last.notBefore) {
			t.Errorf("a worker exited at %s, before the last review's wait ended", at.Format(time.StampMilli))
		}
	}
	if commands > 2*kills {
		t.Errorf("%d operator commands for %d kills", commands, kills)
	}
	left := kills - len(reupload) // in Azurite without a receipt: unknown
	j, err := journal.OpenStore(context.Background(), x.st, journal.Existing())
	if err != nil {
		t.Fatal(err)
	}
	if s := j.Status(time.Now()); s.State != journal.Elapsed || s.Files[journal.FileAcked] != blobTrialFiles-left || s.Files[journal.FileUnknown] != left {
		t.Errorf("the run: %s %q, files %v; want elapsed, %d acked, %d unknown", s.State, s.Reason, s.Files, blobTrialFiles-left, left)
	}
	if code, out, _ := rrj("status", runArg); code != 0 {
		t.Errorf("rrjournal status: exit %d, want 0: %s", code, out)
	}
	sum, err := journal.InspectStore(context.Background(), x.st)
	if err != nil || len(sum.Findings) != 0 || sum.Receipts != blobTrialFiles-left || sum.Reviews != commands {
		t.Errorf("the run: %+v, %v; want %d receipts, %d reviews, no finding", sum, err, blobTrialFiles-left, commands)
	}

	var settled []time.Duration
	for _, r := range rounds {
		for n, h := range r.held {
			end := r.reviewed
			if reupload[h.file] {
				end = puts[h.file][len(puts[h.file])-1]
			}
			settled = append(settled, end.Sub(r.died[n]))
		}
	}
	lo, med, hi := blobDurations(settled)
	waits := 0
	for _, p := range fl.procs {
		waits += len(p.waitLines(t))
	}
	t.Logf("Blob, killed after the upload began: %d kills in %d rounds, %d restarts, %d operator commands (%d pending reviews, %d reuploads), "+
		"%d files sent twice by a reupload decision, %d otherwise; kill to the killed file settled (its reupload sent, or its review) min/median/max %v/%v/%v; "+
		"last round's first kill to done %v (a lease, then the pending review's 30 s); %d 'Next waits' lines from %d processes; %d refusals; wall %v",
		killed, len(rounds), fl.restarts, commands, killed, len(reupload), len(byDecision), len(otherwise),
		lo.Round(time.Millisecond), med.Round(time.Millisecond), hi.Round(time.Millisecond),
		fl.doneAt.Sub(last.firstDied).Round(time.Millisecond), waits, len(fl.procs), len(fl.refusals), wall.Round(time.Millisecond))
}
