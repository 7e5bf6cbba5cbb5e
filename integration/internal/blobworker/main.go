// Command blobworker is one worker of a File batch whose journal run is in
// Azure Blob Storage (docs/policy.md: shared-runs), for the integration tests: it opens the
// shared run with blobjournal, uploads the files its continuation plan
// allows through readrecovery and the test's proxy, one sequence per file,
// and prints one JSON line per file and a last line with why it ended.
//
// A file refused because another worker's request holds its marker while
// the run is clear or elapsed (journal.ErrPending: its shard is busy in a
// parallel run) is put at the back of the queue and tried again ("busy").
// With -share K the worker first takes its own share of the plan (the
// files whose shard, in a parallel run, or else whose index is worker-1
// modulo K), then plans again and takes what is left; with -store-log it appends one JSON line per request of
// the journal store and per upload attempt to a file, for the tests'
// ledger of claims and entries. With -next-loop PAUSE it loops on
// journal.Next instead (nextLoopRun), as a Kubernetes Job's worker would,
// naming itself to the proxy in an X-Worker-Pid header.
//
// Exit codes: 0 every eligible file was tried; 3 the run is waiting
// (a restriction longer than -short); 4 unresolved; 5 a persistence
// failure; 1 anything else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

const (
	account = "devstoreaccount1"
	// The emulator's public, documented development key.
	key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

type line struct {
	Worker  int    `json:"worker"`
	File    string `json:"file,omitempty"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	At      int64  `json:"at_unix_ms"`
}

func main() {
	var (
		store    = flag.String("store", "", "Blob service URL the journal store talks to (straight to Azurite)")
		proxy    = flag.String("proxy", "", "Blob service URL of the uploads (the test's proxy)")
		cont     = flag.String("container", "", "container")
		prefix   = flag.String("prefix", "journal/", "journal prefix")
		files    = flag.Int("files", 200, "planned files f-000 …")
		id       = flag.Int("worker", 0, "worker number")
		seed     = flag.Uint64("seed", 1, "order seed")
		wait     = flag.Duration("pending-wait", 10*time.Second, "journal.WithPendingWait")
		short    = flag.Duration("short", 5*time.Second, "a waiting status this short is waited out")
		approve  = flag.Bool("approve", true, "a new approval: never-attempted files are eligible")
		data     = flag.String("data", "data/", "prefix of the uploaded blobs")
		par      = flag.Int("parallel", 0, "journal.WithParallel(n) (0: the option is not given)")
		share    = flag.Int("share", 0, "take the files of shard (or, without shards, index) worker-1 modulo this first, then the rest (0: all, shuffled)")
		logTo    = flag.String("store-log", "", "append the journal store's requests and the upload attempts to this file")
		maxRun   = flag.Duration("max-run", 5*time.Minute, "give up (exit 1) after this long")
		storeLat = flag.Duration("store-latency", 0, "added before every request of the journal store (a remote Blob endpoint's round trip)")
		cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (a run that ends in done)")
		nextKill = flag.Bool("next-kill", false, "take one file with journal.Next, print it (outcome \"claimed\"), then SIGKILL this process before any upload")
		nextLoop = flag.Duration("next-loop", 0, "loop on journal.Next instead of planning: print each file handed out (outcome \"got\", detail the pause in ms), pause up to this long (reading the file), upload it; end on Next's error (0: plan instead)")
	)
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	out := json.NewEncoder(os.Stdout)
	say := func(file, outcome, detail string) {
		_ = out.Encode(line{Worker: *id, File: file, Outcome: outcome, Detail: detail, At: time.Now().UnixMilli()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), *maxRun)
	defer cancel()
	cred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		fail(say, 1, err)
	}
	log, err := openStoreLog(*logTo, *id)
	if err != nil {
		fail(say, 1, err)
	}
	so := blobjournal.ClientOptions()
	if *storeLat > 0 {
		so.PerCallPolicies = append(so.PerCallPolicies, delayPolicy(*storeLat))
	}
	if log != nil {
		so.PerCallPolicies = append(so.PerCallPolicies, log)
	}
	sc, err := container.NewClientWithSharedKeyCredential(*store+"/"+account+"/"+*cont, cred, so)
	if err != nil {
		fail(say, 1, err)
	}
	plan := make([]journal.PlannedFile, *files)
	for i := range plan {
		plan[i] = journal.PlannedFile{ID: fmt.Sprintf("f-%03d", i)}
	}
	opts := []journal.Option{journal.WithPlan(plan), journal.WithPendingWait(*wait)}
	if *par != 0 {
		opts = append(opts, journal.WithParallel(*par))
	}
	j, err := journal.OpenStore(ctx, blobjournal.New(sc, *prefix), opts...)
	if err != nil {
		fail(say, 1, err)
	}
	var o policy.ClientOptions
	rrazure.Apply(&o, readrecovery.New(nil))
	if *nextLoop > 0 {
		o.PerCallPolicies = append(o.PerCallPolicies, pidHeader{})
	}
	up, err := azblob.NewClientWithSharedKeyCredential(*proxy+"/"+account+"/", cred, &azblob.ClientOptions{ClientOptions: o})
	if err != nil {
		fail(say, 1, err)
	}
	approval := journal.NoNewApproval
	if *approve {
		approval = journal.NewApproval
	}
	if *nextKill {
		f, err := j.Next(ctx, approval)
		if err != nil {
			fail(say, 1, err)
		}
		say(f.ID, "claimed", "")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	if *nextLoop > 0 {
		nextLoopRun(ctx, j, up, *cont, *data, *nextLoop, approval, say)
		return
	}
	c, err := j.PlanContinuation(plan, approval, time.Now())
	if err != nil {
		fail(say, 1, err)
	}
	todo := c.Uploads()
	say("", "plan", fmt.Sprintf("%d eligible of %d (%s)", len(todo), len(plan), c.Status.State))
	r := rand.New(rand.NewPCG(*seed, uint64(*id)))
	if *share > 0 {
		// A parallel run's workers split the plan by shard (then none
		// waits for another's marker); a run without shards by index.
		var own []string
		for _, f := range todo {
			n := j.Shard(f) - 1
			if j.Parallel() == 0 {
				n, _ = strconv.Atoi(strings.TrimPrefix(f, "f-"))
			}
			if n%*share == *id-1 {
				own = append(own, f)
			}
		}
		todo = own
	}
	r.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
	w := &worker{ctx: ctx, j: j, up: up, cont: *cont, data: *data, id: *id, short: *short, say: say, log: log, rng: r}
	w.run(todo)
	if *share > 0 {
		c, err := j.PlanContinuation(plan, approval, time.Now())
		if err != nil {
			fail(say, 1, err)
		}
		rest := c.Uploads()
		say("", "replan", fmt.Sprintf("%d eligible of %d (%s)", len(rest), len(plan), c.Status.State))
		r.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
		w.run(rest)
	}
	say("", "done", "")
}

// worker uploads the files of a queue, one sequence per file.
type worker struct {
	ctx   context.Context
	j     *journal.Journal
	up    *azblob.Client
	cont  string
	data  string
	id    int
	short time.Duration
	say   func(file, outcome, detail string)
	log   *storeLog
	rng   *rand.Rand
}

// run uploads every file of queue once: a busy file goes to the back of
// the queue; a round of nothing but busy files is followed by a short
// pause. A waiting run shorter than -short is waited out; a longer one,
// an unresolved run or a persistence failure ends the process.
func (w *worker) run(queue []string) {
	busyRound := 0
	for len(queue) > 0 {
		if w.ctx.Err() != nil {
			w.say("", "error", "max-run exceeded")
			os.Exit(1)
		}
		f := queue[0]
		queue = queue[1:]
		w.log.attempt(f)
		b := readrecovery.NewBudget(fmt.Sprintf("w%d-%s", w.id, f))
		fctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(w.ctx, b), w.j), f)
		_, err := w.up.UploadBuffer(fctx, w.cont, w.data+f, []byte("content of "+f), nil)
		if err == nil {
			w.say(f, "acked", "")
			busyRound = 0
			continue
		}
		var se *readrecovery.StopError
		var re *azcore.ResponseError
		switch {
		case errors.As(err, &se) && se.Reason == readrecovery.StopReplayRefused:
			w.say(f, "replay-refused", "")
		case errors.As(err, &se) && se.Reason == readrecovery.StopJournalRestricted:
			st := w.j.Status(time.Now())
			if errors.Is(err, journal.ErrPending) && (st.State == journal.Clear || st.State == journal.Elapsed) {
				// Another worker's request holds the marker this file
				// needs: come back to it after the others.
				w.say(f, "busy", "")
				queue = append(queue, f)
				if busyRound++; busyRound >= len(queue) {
					time.Sleep(10*time.Millisecond + time.Duration(w.rng.IntN(20))*time.Millisecond)
					busyRound = 0
				}
				continue
			}
			if st.State == journal.Waiting && time.Duration(st.RemainingSeconds)*time.Second <= w.short {
				w.say(f, "waiting-out", fmt.Sprintf("%d s", st.RemainingSeconds))
				time.Sleep(time.Until(time.Unix(st.NotBeforeUTC, 0)))
				queue = append([]string{f}, queue...)
				busyRound = 0
				continue
			}
			code := 4
			if st.State == journal.Waiting {
				code = 3
			}
			w.say(f, "stopped", fmt.Sprintf("%s not_before_utc=%d", st.State, st.NotBeforeUTC))
			os.Exit(code)
		case errors.As(err, &se) && (se.Reason == readrecovery.StopPersistenceFailed || se.Reason == readrecovery.StopReceiptFailed):
			w.say(f, "stopped", string(se.Reason)+": "+se.Detail)
			os.Exit(5)
		case errors.As(err, &se):
			w.say(f, "stop", string(se.Reason))
		case errors.As(err, &re):
			w.say(f, fmt.Sprintf("status-%d", re.StatusCode), "")
		default:
			w.say(f, "error", err.Error())
		}
		busyRound = 0
	}
}

// nextLoopRun is the worker of -next-loop: it loops on Next, pausing a
// random 0 to pause after each handout ("reading the file", the moment a
// kill before the upload falls in), then uploads the file (outcome
// "acked"; "refused" when the journal refused its first request, which
// leaves the file eligible: the loop goes on). Next's end is the last
// line: "end" with detail "no-more-files" (exit 0), or an error (exit 1).
// Next's one line on why it waits goes to stderr, timed to the millisecond.
func nextLoopRun(ctx context.Context, j *journal.Journal, up *azblob.Client, cont, data string, pause time.Duration,
	a journal.Approval, say func(file, outcome, detail string)) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	for {
		f, err := j.Next(ctx, a)
		if errors.Is(err, journal.ErrNoMoreFiles) {
			say("", "end", "no-more-files")
			return
		}
		if err != nil {
			fail(say, 1, err)
		}
		d := time.Duration(rand.Int64N(int64(pause) + 1))
		say(f.ID, "got", strconv.FormatInt(d.Milliseconds(), 10))
		time.Sleep(d)
		b := readrecovery.NewBudget(fmt.Sprintf("p%d-%s", os.Getpid(), f.ID))
		fctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(ctx, b), j), f.ID)
		_, err = up.UploadBuffer(fctx, cont, data+f.ID, []byte("content of "+f.ID), nil)
		var se *readrecovery.StopError
		switch {
		case err == nil:
			say(f.ID, "acked", "")
		case errors.As(err, &se):
			say(f.ID, "refused", string(se.Reason)+": "+se.Detail)
		default:
			say(f.ID, "error", err.Error())
		}
	}
}

// pidHeader names the worker process in each upload (X-Worker-Pid), for
// the tests' proxy: not signed, not sent to the journal store.
type pidHeader struct{}

func (pidHeader) Do(req *policy.Request) (*http.Response, error) {
	req.Raw().Header.Set("X-Worker-Pid", strconv.Itoa(os.Getpid()))
	return req.Next()
}

// storeLog appends one JSON line per journal store request (a pipeline
// policy of the store's client) and per upload attempt, each written at
// once, so that a killed worker's log ends at its last request.
type storeLog struct {
	mu     sync.Mutex
	f      *os.File
	enc    *json.Encoder
	worker int
}

// StoreEvent is one line of a -store-log: an upload attempt begins
// (Event "attempt", File), or a request of the journal store ended
// (Event "store": Op "create", "read", "list", "remove" or the method;
// Name the blob under the container; Status 0 without a response).
type StoreEvent struct {
	Worker  int    `json:"worker"`
	Event   string `json:"event"`
	File    string `json:"file,omitempty"`
	Op      string `json:"op,omitempty"`
	Name    string `json:"name,omitempty"`
	Status  int    `json:"status,omitempty"`
	StartNs int64  `json:"start_ns"`
	EndNs   int64  `json:"end_ns,omitempty"`
}

func openStoreLog(path string, worker int) (*storeLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &storeLog{f: f, enc: json.NewEncoder(f), worker: worker}, nil
}

func (l *storeLog) write(e StoreEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Worker = l.worker
	_ = l.enc.Encode(e)
}

// attempt records that the upload of file begins.
func (l *storeLog) attempt(file string) {
	if l != nil {
		l.write(StoreEvent{Event: "attempt", File: file, StartNs: time.Now().UnixNano()})
	}
}

// Do implements policy.Policy: it times the store's request.
func (l *storeLog) Do(req *policy.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := req.Next()
	end := time.Now()
	raw := req.Raw()
	op := raw.Method
	q := raw.URL.Query()
	switch {
	case q.Get("comp") == "list":
		op = "list"
	case raw.Method == http.MethodPut:
		op = "create"
	case raw.Method == http.MethodGet:
		op = "read"
	case raw.Method == http.MethodDelete:
		op = "remove"
	case raw.Method == http.MethodHead:
		op = "properties"
	}
	name := raw.URL.Path
	// /ACCOUNT/CONTAINER/NAME: the blob name within the container.
	if parts := strings.SplitN(strings.TrimPrefix(name, "/"), "/", 3); len(parts) == 3 {
		name = parts[2]
	} else {
		name = ""
	}
	status := 0
	if err == nil && resp != nil {
		status = resp.StatusCode
	}
	l.write(StoreEvent{Event: "store", Op: op, Name: name, Status: status, StartNs: start.UnixNano(), EndNs: end.UnixNano()})
	return resp, err
}

// delayPolicy waits d before each request of the store's client.
type delayPolicy time.Duration

func (d delayPolicy) Do(req *policy.Request) (*http.Response, error) {
	tm := time.NewTimer(time.Duration(d))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-req.Raw().Context().Done():
		return nil, req.Raw().Context().Err()
	}
	return req.Next()
}

func fail(say func(string, string, string), code int, err error) {
	say("", "error", err.Error())
	os.Exit(code)
}
