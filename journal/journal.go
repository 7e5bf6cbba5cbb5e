package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Errors of the journal. They are wrapped, never returned bare: test for
// them with errors.Is.
var (
	// errCorrupt means the run directory failed verification: a missing,
	// unreadable, oversized, edited, truncated, reordered or unexpected
	// file, a broken chain, or too many files. Such a run is unresolved;
	// [Journal.Admit] and [Journal.Begin] return a *RestrictedError that
	// wraps errCorrupt too.
	errCorrupt = errors.New("journal: run failed verification")

	// ErrRestricted is wrapped by the *RestrictedError of a run whose state
	// forbids network access (waiting or unresolved).
	ErrRestricted = errors.New("journal: run restricted")

	// errLimit means a request could need a backoff entry or a file beyond
	// the limits (200 entries, 1003 files): Begin refuses it
	// before any network access, with a *FullError (journal-full), never
	// as a persistence failure.
	errLimit = errors.New("journal: run limit reached")

	// ErrPending means pending-request.json already exists: another
	// process is sending a request (its worker holds the marker live), or
	// an earlier request never finished (its worker died). The run is
	// unresolved.
	ErrPending = errors.New("journal: unfinished request pending")

	// ErrLive means a pending review named a marker whose worker holds it
	// live (R83: its lock or lease): its request is in flight, and the
	// review is refused and writes nothing. errors.Is(err, errReviewRefused)
	// holds too.
	ErrLive = errors.New("journal: the marker's worker is alive")

	// ErrPlanMismatch means the plan given to [Open] or
	// [Journal.PlanContinuation] is not the plan the run recorded, or a
	// request names a file outside the plan.
	ErrPlanMismatch = errors.New("journal: plan does not match the run")

	// ErrReplay means a request names a file that this run never sends
	// again: its ACK is on record (acked), it was attempted by an earlier
	// invocation or another Journal without ACK (unknown: only a review
	// opens it again), or a review decided to skip it. Every error that
	// wraps ErrReplay also wraps [readrecovery.ErrReplayRefused], so the
	// transport stops the sequence as replay-refused (docs/policy.md: refusal-says-what-it-is).
	ErrReplay = errors.New("journal: upload not sent again")

	// errReviewRefused means [Journal.Review] refused a review: a decision that
	// is neither reupload nor skip, a file outside the plan, or a file
	// that is not unknown.
	errReviewRefused = errors.New("journal: review refused")
)

// refusal is the error of a request the journal refuses to send because of
// what the run records about its file: it wraps the journal's sentinel
// (ErrReplay or ErrPlanMismatch) and [readrecovery.ErrReplayRefused].
type refusal struct {
	sentinel error
	detail   string
}

func (e *refusal) Error() string   { return e.sentinel.Error() + ": " + e.detail }
func (e *refusal) Unwrap() []error { return []error{e.sentinel, readrecovery.ErrReplayRefused} }

func refuse(sentinel error, format string, args ...any) error {
	return &refusal{sentinel: sentinel, detail: fmt.Sprintf(format, args...)}
}

// FullError is the error of a request, a review or a record refused
// because the run is full: 200 backoff entries, 1003 files,
// or a per-file or per-run numbering limit (docs/policy.md: bounded-journal). Nothing
// failed to be written: the refusal happens before any network access
// (for a request) and its reason is journal-full, never
// persistence-failed. errors.Is(err, errLimit) holds.
type FullError struct {
	// Detail says which limit, with the counts.
	Detail string
}

func (e *FullError) Error() string { return "journal-full: " + e.Detail }

// Unwrap returns errLimit.
func (e *FullError) Unwrap() error { return errLimit }

// JournalFull marks the error as the run's limits (not a failed write),
// for a transport that looks for the method with errors.As and stops the
// sequence as journal-full.
func (e *FullError) JournalFull() {}

// JournalRestricted marks the error as a refusal by the run's state, so
// that a transport that knows no journal-full reason still stops as
// journal-restricted, never as persistence-failed: a full run forbids
// network access.
func (e *FullError) JournalRestricted() {}

func full(format string, args ...any) error { return &FullError{Detail: fmt.Sprintf(format, args...)} }

// errZero is the error of every method of a zero or nil *Journal: only
// [Open], [OpenExisting], [OpenStore] and [OpenExistingStore] make a
// usable one.
var errZero = errors.New("journal: a zero Journal: open one with journal.Open or journal.OpenStore")

// zero reports whether j is nil or a zero Journal (not made by an Open
// function): every method then refuses, never panics.
func (j *Journal) zero() bool { return j == nil || j.b == nil || j.slot == nil }

// zeroStatus is the status of a zero Journal: unresolved, so that nothing
// is ever sent under it.
func zeroStatus() Status {
	return Status{State: Unresolved, Reason: errZero.Error(), cause: errZero}
}

// RestrictedError is the error of [Journal.Admit] and [Journal.Begin] for a
// run that is waiting or unresolved. errors.Is(err, ErrRestricted) holds;
// for an unresolved run errors.Is also finds errCorrupt (failed
// verification) or ErrPending (an unfinished request) when one is the cause.
type RestrictedError struct {
	// Status is the run's status at the time of the question.
	Status Status
}

func (e *RestrictedError) Error() string {
	if e.Status.State == Waiting {
		return fmt.Sprintf("journal: run waiting until not_before_utc %d (%d s remaining): %s",
			e.Status.NotBeforeUTC, e.Status.RemainingSeconds, e.Status.Reason)
	}
	return fmt.Sprintf("journal: run %s: %s", e.Status.State, e.Status.Reason)
}

// JournalRestricted marks the error as a refusal by the run's status (not a
// persistence failure), for a transport that looks for the method with
// errors.As, as azcore looks for NonRetriable.
func (e *RestrictedError) JournalRestricted() {}

// Unwrap returns ErrRestricted and the cause, if any.
func (e *RestrictedError) Unwrap() []error {
	if e.Status.cause != nil {
		return []error{ErrRestricted, e.Status.cause}
	}
	return []error{ErrRestricted}
}

// Option configures [Open] and [OpenExisting].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	plan        []PlannedFile
	clock       clock.Clock
	fs          fsys.FS
	pendingWait time.Duration
	// parallel is WithParallel's n; parallelSet says the option was given.
	parallel    int
	parallelSet bool
}

func newConfig(opts []Option) config {
	c := config{clock: clock.Real{}, fs: fsys.OS{}}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// WithPlan gives the files of the batch. A new run records their
// digestOfPlan in its manifest; an existing run must have recorded the same
// digest, or Open fails with [ErrPlanMismatch]. Begin then refuses an upload
// of a file outside the plan. Default: an empty plan for a new run and no
// check for an existing one. A nil slice is ignored; an empty one is the
// empty plan.
func WithPlan(files []PlannedFile) Option {
	return optionFunc(func(c *config) {
		if files != nil {
			c.plan = append([]PlannedFile{}, files...)
		}
	})
}

// withClock and withFS are the internal seams of the tests (docs/policy.md: clock-is-internal): not
// options users can name.
func withClock(k clock.Clock) Option {
	return optionFunc(func(c *config) {
		if k != nil {
			c.clock = k
		}
	})
}

func withFS(f fsys.FS) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.fs = f
		}
	})
}

// Journal is the durable record of one File batch run: a private directory
// of backoff entries, receipts and the pending-request marker. It
// implements [readrecovery.Journal]; attach it to a run's requests with
// [readrecovery.WithJournal]. It is safe for concurrent use. Journaled
// requests of one run are sent one at a time: Begin waits (honouring its
// context) while another request of this Journal is in flight.
type Journal struct {
	dir         string // where the run is, for messages
	b           *loc   // the run's storage
	clock       clock.Clock
	plan        map[string]bool // file digests of the plan given to Open; nil when none
	pendingWait time.Duration   // see WithPendingWait

	slot chan struct{} // held from Begin to Complete/Backoff

	mu       sync.Mutex
	snap     *snapshot
	inflight *markerFile // the marker this Journal holds, or nil
	// markerVersion is the store's version of the marker this Journal
	// created: its conditional delete names it.
	markerVersion string
	markerData    []byte // the bytes of that marker
	// markerHold ends the store's hold of that marker (Store.Hold): its
	// lock or lease, which tells every other process it is live (R83).
	markerHold func()
	failed     string // a persistence failure; the Journal stays unresolved
	// started holds, by file digest, the upload this Journal began: its
	// later parts and its commit continue that upload while every part so
	// far was accepted; after a 429 only the transport's queue-429 re-send
	// of that request may follow, and after any other outcome nothing. A
	// file with records of its round that this Journal did not begin is
	// unknown and refused.
	started map[string]*ownUpload

	// par is set on the root of a parallel run (WithParallel): its methods
	// go to the shards. group and shardNo are set on a shard's Journal.
	par     *parallelRun
	group   *parallelRun
	shardNo int

	nx nextState // Next's plan and claim (next.go)
}

// ownUpload is the state of an upload this Journal began (see started).
type ownUpload struct {
	round int
	// throttledBy is the event digest of the backoff entry of the upload's
	// latest request when it met 429: only the re-send naming it may go.
	throttledBy, throttledName string
	// closed: a request of the upload ended without a 2xx part (a commit
	// of any outcome, a failed part, a request never sent): nothing of
	// the file is sent again without a review.
	closed bool
}

var _ readrecovery.Journal = (*Journal)(nil)

// Open opens the run in dir, creating a new one when dir does not exist or
// is an empty directory: the directory (mode 0700) and a run manifest
// run.json (0600) declaring backoff_version "1.0" and the plan digest. An
// existing run is verified (see [Inspect]); a run that fails verification
// still opens, with status unresolved and a reason naming the file, so
// that it can be reported; it never opens as clear. Open fails only when
// dir cannot be read or created, or on [ErrPlanMismatch]. The parent of dir
// must exist.
func Open(dir string, opts ...Option) (*Journal, error) { return open(dir, true, opts) }

// OpenExisting is [Open] without creation: a missing or empty dir is an
// error for which errors.Is(err, fs.ErrNotExist) holds, and nothing is ever
// written to open it. `readrecovery journal status` uses it.
func OpenExisting(dir string, opts ...Option) (*Journal, error) { return open(dir, false, opts) }

func open(dir string, create bool, opts []Option) (*Journal, error) {
	cfg := newConfig(opts)
	return openLoc(context.Background(), locOf(newDirStore(cfg.fs, dir)), create, opts)
}

// openLoc opens the run kept in ub; ctx bounds every list and read of the
// opening (R85), never the Journal's later calls (each takes its own).
func openLoc(ctx context.Context, ub *loc, create bool, opts []Option) (*Journal, error) {
	b := ub.with(ctx)
	cfg := newConfig(opts)
	dir := b.where()
	j := &Journal{dir: dir, b: ub, clock: cfg.clock, pendingWait: cfg.pendingWait, slot: make(chan struct{}, 1), started: map[string]*ownUpload{}}
	j.nx.plan = cfg.plan
	planDigest, err := digestOfPlan(cfg.plan)
	if err != nil {
		return nil, err
	}
	planFiles := make([]string, 0, len(cfg.plan))
	for _, f := range cfg.plan {
		planFiles = append(planFiles, FileDigest(f.ID))
	}
	sort.Strings(planFiles)
	if cfg.plan != nil {
		j.plan = make(map[string]bool, len(cfg.plan))
		for _, d := range planFiles {
			j.plan[d] = true
		}
	}
	if cfg.parallelSet && (cfg.parallel < minParallel || cfg.parallel > maxParallel) {
		return nil, fmt.Errorf("journal: WithParallel(%d): the shard count must be %d to %d", cfg.parallel, minParallel, maxParallel)
	}
	if n := rootParallel(b); n > 0 {
		if cfg.parallelSet && cfg.parallel != n {
			return nil, fmt.Errorf("journal: %s is a parallel run of %d shards, not WithParallel(%d)", escapeName(dir), n, cfg.parallel)
		}
		return openParallel(ctx, ub, false, cfg, planFiles, planDigest, n)
	}
	if cfg.parallelSet {
		return openParallel(ctx, ub, create, cfg, planFiles, planDigest, cfg.parallel)
	}
	if err := b.nested(); err != nil {
		return nil, err
	}
	s, err := scanRun(b, nil, cfg.clock.Now())
	if create && err == nil && unfinishedCreation(s) {
		// A creation that stopped before its manifest (another worker's,
		// under way, or one killed partway): finish it.
		err = errNoRun
		planFiles, planDigest = adoptPlan(s, cfg.plan != nil, planFiles, planDigest)
	}
	switch {
	case err == nil:
	case create && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoRun)):
		s, err = j.create(planFiles, planDigest, errors.Is(err, errNoRun), 0, nil)
		if err == nil && s == nil {
			// Another worker linked the manifest first: open its run.
			s, err = scanRun(b, nil, cfg.clock.Now())
		}
		if err != nil {
			return nil, fmt.Errorf("journal: create run %s: %w", escapeName(dir), bareErr(err))
		}
	default:
		return nil, dirError(dir, err)
	}
	if cfg.plan != nil && s.manifest != nil && s.manifest.planDigest != planDigest {
		return nil, fmt.Errorf("%w: %s records plan %s, not %s", ErrPlanMismatch, escapeName(dir), s.manifest.planDigest, planDigest)
	}
	j.snap = s
	return j, nil
}

// create makes a new run: the directory (or, when exists, the empty
// directory made private), the parent's directory entry durable, then
// plan.json (the plan's file digests), then parts (a parallel run's
// shards, when not nil) and last the manifest, each written exclusively
// and atomically. Until the manifest is linked the run is an unfinished
// creation (unfinishedCreation), which the next Open finishes; it is never
// clear, and never unresolved for good. Any number of workers may create
// the same run at once (docs/policy.md: shared-runs): a part that exists
// with the bytes this creation would write is no error, and a manifest
// that exists is the winner's — create then returns a nil snapshot, and the
// caller reads the run. A plan.json that holds another plan is
// [ErrPlanMismatch]. parallel > 0 makes a parallel run's root (its
// manifest says "parallel": n).
func (j *Journal) create(plan []string, planDigest string, exists bool, parallel int, parts func() error) (*snapshot, error) {
	planData, err := encodePlanList(plan)
	if err != nil {
		return nil, err
	}
	if len(planData) > maxPlanBytes {
		return nil, full("the plan of %d files needs %d bytes, over the %d-byte cap", len(plan), len(planData), maxPlanBytes)
	}
	if err := j.b.initRun(exists); err != nil {
		return nil, err
	}
	if err := j.putPart(planName, planData); err != nil {
		return nil, err
	}
	if parts != nil {
		if err := parts(); err != nil {
			return nil, err
		}
	}
	mb := manifestBody{BackoffVersion: backoffVersion, PlanDigest: planDigest, CreatedAtUTC: j.clock.Now().Unix(), Parallel: parallel}
	data, digest, err := encodeManifest(mb)
	if err != nil {
		return nil, err
	}
	if _, err := j.writeAtomic(manifestName, data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, nil // another worker's: the caller reads it
		}
		return nil, err
	}
	mi := manifestInfo{version: backoffVersion, planDigest: planDigest, genesis: digest, parallel: parallel}
	s := newSnapshot()
	s.files, s.manifest, s.planFiles = 2, &mi, plan
	s.cache[manifestName] = mi
	s.cache[planName] = planList{plan, planDigest}
	return s, nil
}

// putPart stores the part name of a creation exclusively. A part that
// exists already (another worker creating the same run, or a creation
// killed after writing it) is no error when it holds exactly data; one
// that holds a different plan is [ErrPlanMismatch].
func (j *Journal) putPart(name string, data []byte) error {
	_, err := j.writeAtomic(name, data)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	had, _, ok := j.b.read(nil, name, maxPlanBytes)
	switch {
	case !ok:
		return fmt.Errorf("%s exists and cannot be read: %w", name, err)
	case !bytes.Equal(had, data):
		return fmt.Errorf("%w: %s records another plan (a creation with another plan)", ErrPlanMismatch, name)
	}
	return nil
}

// unfinishedCreation reports whether s is a run whose creation stopped
// before its manifest: no run.json, and nothing but plan.json and the
// temporary files of durable writes (every request is preceded by the
// manifest, so none was sent).
func unfinishedCreation(s *snapshot) bool {
	if s.manifest != nil {
		return false
	}
	for _, de := range s.listed {
		if _, tmp := parseTempName(de.name); !de.regular || (!tmp && de.name != planName) {
			return false
		}
	}
	return true
}

// adoptPlan is the plan with which an opener finishes an unfinished
// creation: its own when it gave one (given), else the one the creation's
// plan.json records, when readable.
func adoptPlan(s *snapshot, given bool, files []string, digest string) ([]string, string) {
	if pl, ok := s.cache[planName].(planList); ok && !given {
		return pl.files, pl.digest
	}
	return files, digest
}

// Dir returns the run directory, or for a run opened with [OpenStore] the
// store's name (its String method, or "store").
func (j *Journal) Dir() string {
	if j == nil {
		return ""
	}
	return j.dir
}

// Status returns the run's state at now (docs/policy.md: status-before-network, not-before-survives), from what Open or
// the latest Admit, Begin, Complete, Backoff or PlanContinuation read: it
// never touches the disk and never sleeps. A pending marker, including the
// one of a request of this Journal still in flight, makes it unresolved.
// After a persistence failure the Journal stays unresolved; open the run
// again to re-read it.
func (j *Journal) Status(now time.Time) Status {
	if j.zero() {
		return zeroStatus()
	}
	if j.par != nil {
		return j.glance(j.parallelStatus(context.Background(), now, false), now) // reads nothing
	}
	j.mu.Lock()
	st := j.statusLocked(now, false)
	j.mu.Unlock()
	return j.glance(st, now) // statusview.go
}

// statusLocked: with ignoreOwn, the marker of this Journal's own request in
// flight does not count (it will be cleared or will stay for a crash).
func (j *Journal) statusLocked(now time.Time, ignoreOwn bool) Status {
	if j.failed != "" {
		return Status{State: Unresolved, Reason: "persistence failure: " + j.failed}
	}
	return j.snap.status(now, ignoreOwn && j.inflight != nil)
}

// refreshLocked re-reads the directory listing and any file it does not
// know yet (entries and receipts are immutable), so that another process's
// records count.
// ctx bounds every list and read (R85).
func (j *Journal) refreshLocked(ctx context.Context) {
	b := j.b.with(ctx)
	if j.inflight != nil && j.markerData != nil {
		// The marker listed under this Journal's claim is its own: its
		// bytes are known, no read needed.
		b.own = &lightMarker{data: j.markerData, version: j.markerVersion}
	}
	s, err := scanRun(b, j.snap, j.clock.Now())
	if err != nil {
		s = newSnapshot()
		s.addFinding(".", "cannot read the run directory: %s", redact.Text(err.Error()))
	}
	j.snap = s
}

// refreshFinishing is refreshLocked, then the end of what a review that
// died or failed left behind (finishDeadReview), read again when it wrote.
// Only the calls that may write use it (Admit, Begin, the reviews).
func (j *Journal) refreshFinishing(ctx context.Context) {
	j.refreshLocked(ctx)
	if j.finishDeadReview() {
		j.refreshLocked(ctx)
	}
}

// finishDeadReview ends what a review left behind when it died or failed
// after its claim: the run's last record without its head, or a marker
// that sent nothing and blocks every worker. It applies to a marker of a
// review (method REVIEW) whose worker is dead (R83), and to a marker a
// pending review resolved; such a marker's request, if any, is over. When
// the run's last record has no head (the review's record, whose head
// failed), the head is written as its writer would have; then the marker
// is removed while it is still the one read. It reports whether it wrote;
// any failure leaves the run as it was (unresolved by the marker).
func (j *Journal) finishDeadReview() bool {
	s := j.snap
	if j.inflight != nil || j.failed != "" || !s.pending || s.pendingDigest == "" || len(s.findings) > 0 ||
		!(s.pendingResolved != "" || (s.pendingReview && s.pendingLive == holdNone)) {
		return false
	}
	h := 0
	for _, n := range s.heads {
		k, _ := parseHeadName(n)
		h = max(h, k)
	}
	if n := s.lastSeq; n > 0 && h == n-1 {
		hd, _, err := seal(kindHead, n, link{s.seq[n].name, s.seq[n].Digest}, &headBody{})
		if err != nil {
			return false
		}
		if _, err := j.writeAtomic(headName(n), hd); err != nil && !errors.Is(err, fs.ErrExist) {
			return false
		}
	} else if h != n {
		return false
	}
	return j.removeResolved(s) == nil
}

// Admit reports whether a request of this run may access the network at
// now: nil only when the status is clear or elapsed, else a
// *RestrictedError with the status (docs/policy.md: status-before-network), or, when ctx has already
// ended, ctx's error (wrapped): the caller's own cancellation, not a
// restriction (refusal-says-what-it-is). It re-reads the directory first. It never sleeps.
// The marker of this Journal's own request in flight does not count here
// (Begin orders requests).
func (j *Journal) Admit(ctx context.Context, now time.Time) error {
	if j.zero() {
		return &RestrictedError{Status: zeroStatus()}
	}
	if ctx == nil {
		return errors.New("journal: admit: nil context")
	}
	if j.par != nil {
		return j.parallelAdmit(ctx, now)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("journal: not admitted: %w", err)
	}
	w := j.newPendingWaiter()
	for {
		j.mu.Lock()
		j.refreshFinishing(ctx)
		at := now.Add(w.waited())
		s := j.statusLocked(at, true)
		id := j.snap.pendingID
		j.mu.Unlock()
		if s.Allows() {
			return nil
		}
		err := error(&RestrictedError{Status: s})
		if !w.again(ctx, err, id) {
			return w.result(err)
		}
	}
}

// pendingWaiter is one wait of Admit or Begin for another worker's
// pending marker to go (see [WithPendingWait]).
type pendingWaiter struct {
	j      *Journal
	start  time.Time
	id     string    // the marker last seen
	since  time.Time // when it was first seen
	ctxErr error
}

func (j *Journal) newPendingWaiter() *pendingWaiter {
	now := j.clock.Now()
	return &pendingWaiter{j: j, start: now, since: now}
}

// waited is the time spent waiting so far.
func (w *pendingWaiter) waited() time.Duration { return max(w.j.clock.Now().Sub(w.start), 0) }

// again reports whether err, a refusal because of the marker id, is worth
// waiting out: another worker's marker that the store does not show dead
// (R83), seen for less than the wait allowed. It sleeps one poll interval
// first; false when the context ended (recorded for result) or the wait
// is over. The wait is this process's own sight of the marker, never a
// comparison with a time another machine wrote: a live marker at the end
// of it is still a request in flight (refused as such, never judged dead).
func (w *pendingWaiter) again(ctx context.Context, err error, id string) bool {
	var re *RestrictedError
	if w.j.pendingWait <= 0 || !errors.As(err, &re) || !errors.Is(err, ErrPending) || re.Status.abandoned {
		return false
	}
	now := w.j.clock.Now()
	if id != w.id {
		w.id, w.since = id, now
	}
	left := w.j.pendingWait - now.Sub(w.since)
	if left <= 0 {
		return false
	}
	if serr := w.j.clock.Sleep(ctx, min(left, pendingPoll+time.Duration(rand.Int64N(int64(pendingPoll))))); serr != nil {
		w.ctxErr = serr
		return false
	}
	return true
}

// result is the error to return when the wait ends without admission.
func (w *pendingWaiter) result(err error) error {
	if w.ctxErr != nil {
		return fmt.Errorf("journal: not admitted while another worker's request was in flight: %w", w.ctxErr)
	}
	return err
}

// Begin records that a request is about to be sent: it creates
// pending-request.json exclusively (O_EXCL, 0600) with the method, URL
// digest, attempt, resend-of digest, file identity digest (see
// [WithUpload], [WithUploadPart]) and the clock's time, fsyncs it and the
// directory (docs/policy.md: journal-claim-then-check). It first waits for this Journal's request in
// flight, if any. Then it claims the marker and only then checks, under
// it, the status, the plan and the file's records (docs/policy.md: journal-claim-then-check): no other
// process or Journal can be authorised between the check and the send. A
// refusal found under the claim removes the marker again; nothing is sent.
//
// The errors, by class (the transport maps each to its own stop, refusal-says-what-it-is):
//   - the context's error (wrapped: errors.Is(err, context.Canceled) or
//     DeadlineExceeded): ctx ended while waiting for the request in flight
//     (journal-slot-honours-deadline). Nothing was written.
//   - a refusal wrapping [readrecovery.ErrReplayRefused]: the file is
//     acked, unknown (attempted without ACK, not by this Journal's upload
//     in progress), skipped by a review ([ErrReplay]), or outside the plan
//     ([ErrPlanMismatch]). Nothing is left on disk.
//   - a *RestrictedError (errors.Is(err, ErrRestricted)): the run is
//     waiting or unresolved, or another request's marker exists
//     ([ErrPending]). Nothing was written.
//   - anything else is a persistence failure (persistence-failure-is-terminal): the marker could not
//     be written or removed, a limit would be exceeded, or the
//     request cannot be recorded (an invalid method, digest or resend-of).
//     After a write failure the Journal stays unresolved.
//
// After a nil error the caller must call exactly one of Complete or
// Backoff.
func (j *Journal) Begin(ctx context.Context, req readrecovery.JournalRequest) error {
	if j.zero() {
		return &RestrictedError{Status: zeroStatus()}
	}
	if ctx == nil {
		return errors.New("journal: begin: nil context")
	}
	if err := validRequest("", req.Method, req.URLDigest, req.Attempt, req.ResendOf); err != nil {
		return fmt.Errorf("journal: begin: %w", err)
	}
	if j.par != nil {
		sj := j.par.route(ctx, req)
		err := sj.Begin(ctx, req)
		var re *RestrictedError
		if errors.As(err, &re) && !re.Status.named {
			// The shard's own status: name the shard.
			re.Status.Reason = shardReason(sj.shardNo, re.Status.Reason)
		}
		return err
	}
	if ok, err := j.beginClaimed(ctx, req); ok { // the file Next claimed (next.go)
		return err
	}
	if err := j.acquire(ctx); err != nil {
		return err
	}
	w := j.newPendingWaiter()
	for try := 0; ; try++ {
		j.mu.Lock()
		err := j.beginLocked(ctx, req, try == 0)
		id := ""
		if err != nil && j.snap != nil {
			id = j.snap.pendingID
		}
		j.mu.Unlock()
		if err == nil {
			return nil
		}
		if !w.again(ctx, err, id) {
			<-j.slot
			return w.result(err)
		}
	}
}

// acquire takes this Journal's one request slot, or returns ctx's error
// (wrapped) when ctx ends first (journal-slot-honours-deadline).
func (j *Journal) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("journal: not begun: %w", err)
	}
	select {
	case j.slot <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("journal: not begun while waiting for the request in flight: %w", ctx.Err())
	}
	if err := ctx.Err(); err != nil {
		<-j.slot
		return fmt.Errorf("journal: not begun: %w", err)
	}
	return nil
}

func (j *Journal) beginLocked(ctx context.Context, req readrecovery.JournalRequest, first bool) error {
	m := markerFile{
		BackoffVersion: backoffVersion, Method: req.Method, URLDigest: req.URLDigest,
		Attempt: req.Attempt, ResendOf: req.ResendOf,
	}
	if u, ok := ctx.Value(uploadKey{}).(uploadMark); ok && httprule.IsMutation(req.Method) {
		m.FileDigest, m.Part = FileDigest(u.id), u.part
	}
	// A first check without the claim refuses early and writes nothing;
	// the check that authorises the request is the one under the claim.
	// A shard of a parallel run checks first what it read last (at its
	// Admit or its last request), and reads again only when that refuses.
	cached := first && j.group != nil
	if !cached {
		j.refreshFinishing(ctx)
	}
	now := j.clock.Now()
	check := func() error {
		if err := j.checkLimits(); err != nil {
			return err
		}
		return j.checkRequest(m, now)
	}
	err := check()
	if err != nil && cached {
		j.refreshFinishing(ctx)
		err = check()
	}
	if err != nil {
		return err
	}
	m.BegunAtUTC = now.Unix()
	if err := j.claim(m); err != nil {
		return err
	}
	var others Status
	if g := j.group; g != nil {
		// Under the claim, every other shard too, read at the same time
		// as this one: a restriction any worker recorded blocks this
		// request (parallel-shards).
		done := make(chan struct{})
		go func() {
			defer close(done)
			others = g.others(ctx, j.shardNo, j.rootSnap(), j.clock.Now())
		}()
		j.refreshLocked(ctx)
		<-done
	} else {
		j.refreshLocked(ctx)
	}
	if err := j.checkRequest(m, j.clock.Now()); err != nil {
		return j.unclaim(err)
	}
	if j.group != nil && !others.Allows() {
		return j.unclaim(&RestrictedError{Status: others})
	}
	if m.FileDigest != "" {
		if err := j.beginRecord(m); err != nil {
			return err
		}
		round := j.snap.view(m.FileDigest, true).round
		if u := j.started[m.FileDigest]; u == nil || u.round != round {
			j.started[m.FileDigest] = &ownUpload{round: round}
		}
	}
	return nil
}

// checkLimits refuses a request that could need more than the run may
// hold (bounded-journal): a request adds at most footprint files, or one entry.
func (j *Journal) checkLimits() error {
	s := j.snap
	files := s.files
	if j.inflight != nil {
		files-- // the marker of the claim counts in footprint
	}
	if len(s.entries) >= maxEntries {
		return full("%d backoff entries recorded, the most a run holds: entry %d could not be written, so nothing is sent", len(s.entries), len(s.entries)+1)
	}
	if files+footprint > maxFiles {
		return full("%d files in the run; a request needs room for %d more of at most %d, so nothing is sent", files, footprint, maxFiles)
	}
	return nil
}

// checkRequest decides whether the request of marker m may be sent at now,
// from the current snapshot. The marker of this Journal's claim does not
// count.
func (j *Journal) checkRequest(m markerFile, now time.Time) error {
	s := j.snap
	if st := j.statusLocked(now, true); !st.Allows() {
		return &RestrictedError{Status: st}
	}
	if m.FileDigest != "" {
		if (j.plan != nil && !j.plan[m.FileDigest]) || !s.inPlan(m.FileDigest) {
			return refuse(ErrPlanMismatch, "the upload names a file outside the plan")
		}
		if err := j.checkFile(m); err != nil {
			return err
		}
	}
	if m.ResendOf != "" && !s.hasEntry(m.ResendOf, m.FileDigest) {
		return errors.New("journal: begin: resend_of names no backoff entry of this run for this file")
	}
	return nil
}

// checkFile refuses a part or commit of a file that this run never sends
// again (upload-only-continuation, parts-are-not-acks, operator-review).
func (j *Journal) checkFile(m markerFile) error {
	s := j.snap
	fd := s.decide(m.FileDigest, NewApproval, Status{State: Clear}, true)
	name := "the file"
	switch fd.State {
	case FileAcked:
		return refuse(ErrReplay, "%s is acked: %s", name, fd.Reason)
	case FileReviewed:
		if fd.Decision == DecisionSkip {
			return refuse(ErrReplay, "%s: %s", name, fd.Reason)
		}
	case FileUnknown:
		v := s.view(m.FileDigest, true)
		u := j.started[m.FileDigest]
		if u == nil || u.round != v.round || v.receipt != nil || v.bad != "" || u.closed {
			return refuse(ErrReplay, "%s is unknown: %s", name, fd.Reason)
		}
		if u.throttledBy != "" && (m.Attempt != 2 || m.ResendOf != u.throttledBy) {
			// After a 429 the one request that may follow is the
			// transport's own queue-429 re-send of the throttled request.
			return refuse(ErrReplay, "%s is unknown: %s: its upload met 429; only the transport's queue-429 re-send of that request may follow, never another send", name, u.throttledName)
		}
		return nil // this Journal's own upload of the round, in progress
	}
	return nil
}

// claim creates the marker m exclusively and makes it durable; this
// Journal then holds it (inflight). An existing marker is another
// request's: a *RestrictedError wrapping ErrPending, nothing written.
func (j *Journal) claim(m markerFile) error {
	m.Host, m.PID = workerHost, workerPID
	data, err := marshalLine(m)
	if err != nil {
		return err
	}
	if err := j.writeMarker(data); err != nil {
		return err
	}
	j.snap.pending, j.snap.pendingFile, j.snap.files = true, m.FileDigest, j.snap.files+1
	j.inflight = &m
	return nil
}

// unclaim removes the marker of a claim whose check refused the request
// (nothing was sent) and returns the refusal, or a persistence failure
// when the marker cannot be removed (the run stays unresolved).
func (j *Journal) unclaim(refusal error) error {
	j.inflight = nil
	if err := j.clearMarker(); err != nil {
		j.fail("remove pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: begin: refused (%v), and the marker could not be removed: %w", refusal, bareErr(err))
	}
	return refusal
}

// writeMarker creates the marker exclusively and makes it durable. A
// failure after the creation removes it again (nothing was sent) when it
// can; the Journal stays unresolved either way.
func (j *Journal) writeMarker(data []byte) error {
	version, hold, err := j.b.createMarker(data)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another request's marker: the run is unresolved on disk;
			// nothing of this Journal failed.
			reason := markerName + ": " + pendingProblem
			if r := j.snap.pendingResolved; r != "" {
				reason = markerName + ": resolved by " + r + " but still present: `journal review --pending` again removes it"
			}
			return &RestrictedError{Status: Status{State: Unresolved, Reason: reason, cause: ErrPending}}
		}
		j.fail("create pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: begin: %w", err)
	}
	j.markerVersion, j.markerData, j.markerHold = version, data, hold
	return nil
}

// release ends the hold of this Journal's marker, once its request (or
// review) is over: a marker still present after that (a write that
// failed) is dead for every other process at once, and an operator's
// pending review resolves it.
func (j *Journal) release() {
	if j.markerHold != nil {
		j.markerHold()
		j.markerHold = nil
	}
}

func writeSyncClose(f fsys.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fail records a persistence failure: the Journal is unresolved from now on.
func (j *Journal) fail(why string) {
	if j.failed == "" {
		j.failed = why
		if j.group != nil {
			j.group.noteFailure(j.shardNo, why)
		}
	}
}

// putRecord seals body as the run's next record, of kind and named name,
// stores it exclusively, then the run's head naming it — unless the begun
// head of its request stands for it (R85) — and removes the heads it
// replaces (deletion-detected). linked reports whether the record exists
// durably; an error after that is the head's (a persistence failure: the
// marker stays, so the run is unresolved until a review).
func (j *Journal) putRecord(name, kind string, body any) (e env, linked bool, err error) {
	s := j.snap
	seq, prev := s.nextLink()
	if seq == 0 {
		return env{}, false, errors.New("run.json is unusable: nothing is written")
	}
	data, digest, err := seal(kind, seq, prev, body)
	if err != nil {
		return env{}, false, err
	}
	e = env{Seq: seq, Prev: prev, Digest: digest}
	linked, err = j.writeAtomic(name, data)
	s.gen = scanGen.Add(1) // what this Journal wrote is news
	if !linked {
		return e, false, err
	}
	s.seq[seq], s.lastSeq = seqRec{name, e}, max(s.lastSeq, seq)
	s.cache[name] = loaded{e, body}
	s.files++
	if err != nil {
		return e, true, err
	}
	if b := s.begun; b != nil && b.Seq == seq {
		s.begun = nil
		return e, true, nil
	}
	return e, true, j.putHead(seq, link{name, digest}, nil)
}

// putHead writes head-seq after prev, the run's last record — a begun head
// when begun is not nil (beginRecord) — then removes the heads it
// replaces.
func (j *Journal) putHead(seq int, prev link, begun *begunRequest) error {
	s := j.snap
	body := &headBody{Begun: begun}
	hd, digest, err := seal(kindHead, seq, prev, body)
	if err != nil {
		return err
	}
	hn := headName(seq)
	hl, err := j.writeAtomic(hn, hd)
	if hl {
		e := env{Seq: seq, Prev: prev, Digest: digest}
		s.cache[hn] = loaded{e, body} // immutable: the next scan need not read it
		s.files++
		if begun != nil {
			s.begun = &begunHead{hn, e, *begun}
		}
		older := s.heads
		s.heads = []string{hn}
		for _, o := range older {
			if o == hn {
				continue
			}
			if err := j.b.removeHead(o); err == nil || errors.Is(err, fs.ErrNotExist) {
				s.files--
			} else {
				s.heads = append(s.heads, o) // removed by a later write
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", hn, err)
	}
	return nil
}

// beginRecord makes the begin of an upload's request durable in the run's
// chain before it is sent, under its claim (R85): a begun head, so that a
// marker removed by hand is a finding, never a way to make its file
// eligible. A head not written sends nothing (the claim ends); one
// written but not durably is a persistence failure (the marker stays).
func (j *Journal) beginRecord(m markerFile) error {
	seq, prev := j.snap.nextLink()
	err := j.putHead(seq, prev, &begunRequest{Method: m.Method, URLDigest: m.URLDigest, FileDigest: m.FileDigest,
		Part: m.Part, Attempt: m.Attempt, ResendOf: m.ResendOf, BegunAtUTC: m.BegunAtUTC})
	if err == nil {
		return nil
	}
	j.fail("write " + headName(seq) + ": " + redact.Text(err.Error()))
	if j.snap.begun == nil {
		return j.unclaim(fmt.Errorf("journal: begin: %w", bareErr(err)))
	}
	j.inflight = nil
	j.release() // nothing is sent: the marker is dead for every other process
	return fmt.Errorf("journal: begin: %w", bareErr(err))
}

// writeAtomic stores the immutable record name exclusively (see
// [dirStore.put] for the directory's durable-write sequence). linked
// reports whether name exists durably.
func (j *Journal) writeAtomic(name string, data []byte) (linked bool, err error) {
	return j.b.put(name, data)
}

// clearMarker removes the marker this Journal created (conditionally on
// its version, in a store that has versions).
func (j *Journal) clearMarker() error {
	err := j.b.removeMarker(j.markerVersion)
	j.release() // after the removal: the marker is never unheld while present and in flight
	if err != nil {
		return err
	}
	j.markerVersion, j.markerData = "", nil
	j.snap.gen = scanGen.Add(1)
	j.snap.pending, j.snap.pendingFile, j.snap.pendingID = false, "", ""
	j.snap.files--
	return nil
}

// finish ends the request in flight: the marker is this Journal's no more
// and the next Begin may proceed.
func (j *Journal) finish() {
	j.inflight = nil
	j.release()
	<-j.slot
}

// takeInflight checks that req is the request Begin recorded.
func (j *Journal) takeInflight(req readrecovery.JournalRequest) (*markerFile, error) {
	m := j.inflight
	if m == nil {
		return nil, errors.New("journal: no request in flight (Begin was not called)")
	}
	if m.Method != req.Method || m.URLDigest != req.URLDigest || m.Attempt != req.Attempt || m.ResendOf != req.ResendOf {
		j.fail("request differs from the one begun")
		return m, errors.New("journal: the request differs from the one Begin recorded")
	}
	return m, nil
}

// Backoff records a 429 of the request in flight as the next immutable
// backoff-NNNN.json, written atomically (see the package documentation),
// then removes pending-request.json and fsyncs the directory (docs/policy.md: immutable-chained-entries,
// queue-429-route). The entry binds the plan digest, the previous entry's digest, the
// method, URL digest, sanitized request ID and status of out, ra, timing
// (nil: none known; the run becomes unresolved) and the upload provenance;
// it returns the entry's event digest. ctx does not cancel the write.
//
// Any error is a persistence failure (persistence-failure-is-terminal): the marker stays, the Journal
// is unresolved, and the caller must neither wait nor re-send. When the
// entry itself was written before the failure, its digest is returned with
// the error.
func (j *Journal) Backoff(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome, ra readrecovery.RetryAfter, timing *readrecovery.RetryAfterTiming) (string, error) {
	if j.zero() {
		return "", errZero
	}
	if j.par != nil {
		return j.par.route(ctx, req).Backoff(ctx, req, out, ra, timing)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m, err := j.takeInflight(req)
	if m == nil {
		return "", err
	}
	defer j.finish()
	if err != nil {
		return "", err
	}
	s := j.snap
	e := entryBody{
		BackoffVersion: backoffVersion,
		Sequence:       len(s.entries) + 1,
		PlanDigest:     s.planDigest(),
		Method:         req.Method,
		URLDigest:      req.URLDigest,
		RequestID:      redact.ID(out.RequestID),
		Status:         out.StatusCode,
		RetryAfter:     retryAfterJSON{Kind: string(ra.Kind), Value: ra.Value},
		Provenance:     provenance{FileDigest: m.FileDigest, Attempt: req.Attempt, ResendOf: req.ResendOf, Part: m.Part},
	}
	if timing != nil && representable(timing) {
		// A timing beyond the shared bound is no timing: the entry is
		// recorded without it (the run is unresolved), never refused.
		e.Timing = &timingJSON{timing.ReceivedAtUTC, timing.NotBeforeUTC, timing.ServerDelaySeconds}
	}
	if e.Sequence > maxEntries {
		j.fail("entry limit")
		return "", full("entry %d is beyond the %d a run holds", e.Sequence, maxEntries)
	}
	if err := validEntry(e); err != nil {
		j.fail("invalid backoff entry: " + err.Error())
		return "", fmt.Errorf("journal: backoff: %w", err)
	}
	name := entryName(e.Sequence)
	ev, linked, err := j.putRecord(name, kindEntry, &e)
	digest := ev.Digest
	if u := j.started[m.FileDigest]; m.FileDigest != "" && u != nil {
		if linked {
			u.throttledBy, u.throttledName = digest, name
		} else {
			u.closed = true
		}
	}
	if linked {
		s.entries = append(s.entries, entryRec{name, ev, e})
		if why := untimed(e); why != "" {
			s.untimed = append(s.untimed, name)
			s.addFinding(name, "%s", why)
		}
	}
	if err != nil {
		j.fail("write " + name + ": " + redact.Text(err.Error()))
		if !linked {
			digest = ""
		}
		return digest, fmt.Errorf("journal: backoff: %w", err)
	}
	if err := j.clearMarker(); err != nil {
		j.fail("remove pending-request.json: " + redact.Text(err.Error()))
		return digest, fmt.Errorf("journal: backoff: %w", err)
	}
	return digest, nil
}

// Complete ends the request in flight for every outcome but a 429 (a 429
// is refused: it keeps the marker and returns an error). For an upload's
// commit (a mutation whose context carries [WithUpload]) it first writes
// the immutable commit receipt atomically: the ACK (status 2xx, request
// ID, ETag, attempt) or, for any other outcome, the record that the upload
// was attempted without ACK, so that it is never replayed (upload-only-continuation). For a
// part ([WithUploadPart]) it writes the next part receipt of the file
// (part-<hex>-NNNN.json): the part's outcome, never the file's ACK (parts-are-not-acks).
// Then it removes pending-request.json and fsyncs the directory. An error
// means the receipt or the marker removal failed (receipt-failure-keeps-ack): the marker stays,
// the Journal is unresolved, and the caller keeps the ACK and stops.
func (j *Journal) Complete(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome) error {
	if j.zero() {
		return errZero
	}
	if j.par != nil {
		return j.par.route(ctx, req).Complete(ctx, req, out)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m, err := j.takeInflight(req)
	if m == nil {
		return err
	}
	defer j.finish()
	if err != nil {
		return err
	}
	if httprule.IsThrottled(out.StatusCode) {
		// A 429 completed as if it were anything else would lose its
		// restriction: refuse, keep the marker (unresolved).
		j.fail("a 429 was completed without its backoff entry")
		return errors.New("journal: complete: a 429 must be recorded with Backoff")
	}
	var name, kind string
	var body any
	var add func(env)
	s := j.snap
	ok2xx := httprule.IsSuccess(out.StatusCode)
	if u := j.started[m.FileDigest]; m.FileDigest != "" && u != nil {
		// A part's 2xx continues the upload; any other outcome (a commit
		// included) ends what this Journal may send of the file.
		u.throttledBy, u.throttledName = "", ""
		u.closed = u.closed || !m.Part || !ok2xx
	}
	switch {
	case m.FileDigest != "" && m.Part:
		p := partBody{
			PlanDigest: s.planDigest(), FileDigest: m.FileDigest, Part: len(s.parts[m.FileDigest]) + 1,
			Method: req.Method, URLDigest: req.URLDigest, Attempt: req.Attempt, ResendOf: req.ResendOf,
			Status: out.StatusCode, Accepted: ok2xx, RequestID: redact.ID(out.RequestID),
			ETag: redact.ETag(out.ETag), TransportError: redact.Text(out.TransportError),
			RecordedAtUTC: j.clock.Now().Unix(),
		}
		if p.Part > maxParts {
			j.fail("part limit")
			return full("part %d of one file is beyond the %d a file holds", p.Part, maxParts)
		}
		name, kind, body = partName(m.FileDigest, p.Part), kindPart, &p
		add = func(e env) { s.parts[m.FileDigest] = append(s.parts[m.FileDigest], partRec{name, e, p}) }
	case m.FileDigest != "":
		round := s.view(m.FileDigest, true).round
		r := receiptBody{
			PlanDigest: s.planDigest(), FileDigest: m.FileDigest, Method: req.Method, URLDigest: req.URLDigest,
			Attempt: req.Attempt, ResendOf: req.ResendOf, Status: out.StatusCode, ACK: ok2xx,
			RequestID: redact.ID(out.RequestID), ETag: redact.ETag(out.ETag),
			TransportError: redact.Text(out.TransportError), RecordedAtUTC: j.clock.Now().Unix(),
		}
		if round > 1 {
			r.Round = round
		}
		name, kind, body = receiptNameRound(m.FileDigest, round), kindReceipt, &r
		add = func(e env) {
			if s.receipts[m.FileDigest] == nil {
				s.receipts[m.FileDigest] = map[int]receiptFile{}
			}
			s.receipts[m.FileDigest][round] = receiptFile{e, r}
		}
	}
	if name != "" {
		e, linked, err := j.putRecord(name, kind, body)
		if linked {
			add(e)
		}
		if err != nil {
			j.fail("write " + name + ": " + redact.Text(err.Error()))
			return fmt.Errorf("journal: receipt: %w", bareErr(err))
		}
	}
	if err := j.clearMarker(); err != nil {
		j.fail("remove pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: complete: %w", bareErr(err))
	}
	return nil
}

type uploadKey struct{}

// uploadMark is what WithUpload and WithUploadPart put in a context.
type uploadMark struct {
	id   string
	part bool
}

// WithUpload returns a copy of ctx whose request commits the upload of the
// planned file with identity id (its [PlannedFile.ID]): the request whose
// 2xx is the file's ACK (a single-request upload, or the last request of a
// multi-request one: Blob Put Block List, the last Files Put Range). The
// journal binds the file's [FileDigest] as the upload provenance of the
// request's marker, backoff entries and commit receipt. An empty id
// returns ctx unchanged.
func WithUpload(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, uploadKey{}, uploadMark{id: id})
}

// WithUploadPart returns a copy of ctx whose request is one part of the
// upload of the planned file with identity id (Blob Put Block, Files
// Create or Put Range before the commit). A part is journaled like the
// commit (marker, backoff entries) and leaves a part receipt, but its 2xx
// is never the file's ACK: only the request marked [WithUpload] records
// it. A file with parts and no committed ACK is unknown in the
// continuation plan (docs/policy.md: parts-are-not-acks). An empty id returns ctx unchanged.
func WithUploadPart(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, uploadKey{}, uploadMark{id: id, part: true})
}

// hasEntry reports whether an entry has event digest d and, when both name
// a file, the same file.
func (s *snapshot) hasEntry(d, file string) bool {
	for _, e := range s.entries {
		if e.Digest == d {
			f := e.Provenance.FileDigest
			return f == "" || file == "" || f == file
		}
	}
	return false
}
