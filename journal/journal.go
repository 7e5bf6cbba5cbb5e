package journal

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Errors of the journal, always wrapped: test for them with errors.Is. A request for a
// file this run never sends again wraps [readrecovery.ErrReplayRefused]; one refused
// because the run is full has the methods JournalFull and JournalRestricted (find them
// with errors.As); a refused review says why, and writes nothing.
var (
	// ErrNotRun means a directory holds files but none of the names a journal
	// writes (run.json, backoff-*, receipt-*, …): it is not a journal run, and
	// the journal neither reports it as a run nor writes into it.
	ErrNotRun = store.ErrNotRun
	// ErrPending means pending-request.json already exists: another process is sending a
	// request (its worker holds the marker live), or an earlier one never finished (its
	// worker died). The run is unresolved.
	ErrPending = runread.ErrPending
	// ErrRestricted is wrapped by the *RestrictedError of a run whose state
	// forbids network access (waiting or unresolved).
	ErrRestricted = errors.New("journal: run restricted")

	errLimit = errors.New("journal: run limit reached") // the run is full (fullError)

	// errLive: a pending review named a marker whose worker holds it live; errReviewRefused holds too.
	errLive = errors.New("journal: the marker's worker is alive")

	// ErrPlanMismatch means the plan given to [Open] or [Journal.PlanContinuation] is not
	// the plan the run recorded, or a request names a file outside the plan.
	ErrPlanMismatch = errors.New("journal: plan does not match the run")

	errReplay = errors.New("journal: upload not sent again") // a file this run never sends again

	// errReviewRefused: a decision neither reupload nor skip, a file outside the plan or not
	// unknown, no marker to resolve.
	errReviewRefused = errors.New("journal: review refused")
)

// refusal is a request refused for what the run records about its file: it
// wraps sentinel (errReplay or ErrPlanMismatch) and [readrecovery.ErrReplayRefused].
type refusal struct {
	sentinel error
	detail   string
}

func (e *refusal) Error() string   { return e.sentinel.Error() + ": " + e.detail }
func (e *refusal) Unwrap() []error { return []error{e.sentinel, readrecovery.ErrReplayRefused} }

func refuse(sentinel error, format string, args ...any) error {
	return &refusal{sentinel: sentinel, detail: fmt.Sprintf(format, args...)}
}

// fullError: the run is too full for the request (bounded-journal), refused before any
// network access. A transport that knows only JournalRestricted still stops as
// journal-restricted, never persistence-failed.
type fullError struct{ detail string }

func (e *fullError) Error() string      { return "journal-full: " + e.detail }
func (e *fullError) Unwrap() error      { return errLimit }
func (e *fullError) JournalFull()       {}
func (e *fullError) JournalRestricted() {}

func full(format string, args ...any) error { return &fullError{detail: fmt.Sprintf(format, args...)} }

// errZero is every method's error on a zero or nil *Journal; its status is unresolved.
var errZero = errors.New("journal: a zero Journal: open one with journal.Open or journal.OpenStore")

func zeroStatus() Status {
	return Status{State: Unresolved, Reason: errZero.Error(), cause: errZero}
}

// RestrictedError is the error of [Journal.Admit] and [Journal.Begin] for a run that is
// waiting or unresolved. errors.Is(err, ErrRestricted) holds; for an unresolved run
// errors.Is also finds [ErrPending] (an unfinished request) when that is the cause.
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

// JournalRestricted marks the error as a refusal by the run's status, not a
// persistence failure, for a transport that looks for it with errors.As.
func (e *RestrictedError) JournalRestricted() {}

// Unwrap returns ErrRestricted and the cause, if any.
func (e *RestrictedError) Unwrap() []error {
	if e.Status.cause != nil {
		return []error{ErrRestricted, e.Status.cause}
	}
	return []error{ErrRestricted}
}

// Option configures [Open] and [OpenStore].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	plan        []PlannedFile
	clock       clock.Clock
	fs          fsys.FS
	pendingWait time.Duration
	parallel    int  // WithParallel's n
	parallelSet bool // WithParallel was given
	existing    bool // Existing: never create
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

// WithPlan gives the files of the batch. A new run records the plan's
// digest in its manifest; an existing run must have recorded the same, or
// Open fails with [ErrPlanMismatch]. Begin refuses an upload of a file
// outside the plan. Default: an empty plan for a new run and no check for
// an existing one. A nil slice is ignored; an empty one is the empty plan.
func WithPlan(files []PlannedFile) Option {
	return optionFunc(func(c *config) {
		if files != nil {
			c.plan = append([]PlannedFile{}, files...)
		}
	})
}

// Journal is the durable record of one File batch run; it implements [readrecovery.Journal]
// and is safe for concurrent use. Journaled requests of one run (of one shard of a parallel
// run) are sent one at a time: Begin waits (honouring its context) while another request of
// this Journal is in flight there.
type Journal struct {
	dir   string
	clock clock.Clock
	r     runner    // a run, or a parallel run's root; nil in a zero Journal
	nx    nextState // Next's plan and claims (next.go)
}

// runner is what a Journal opens: one *run, or a parallel run's *root, which sends each
// call to the shard (a *run) that records it.
type runner interface {
	Admit(ctx context.Context, now time.Time) error
	Begin(ctx context.Context, req readrecovery.JournalRequest) error
	// route is the run that records req: the run itself, or its shard.
	route(ctx context.Context, req readrecovery.JournalRequest) *run
	status(now time.Time) Status
	// continuation is PlanContinuation of files, or RecordedPlan with files nil.
	continuation(files []PlannedFile, approval Approval, now time.Time) (Continuation, error)
	Review(ctx context.Context, file string, decision Decision, note string) (ReviewRecord, error)
	ReviewPendingMarker(ctx context.Context, marker, note string, notBefore int64) (ReviewRecord, error)
	ReviewRestriction(ctx context.Context, entry, note string, notBefore int64) (ReviewRecord, error)
	// lanes are the runs that record the files (the run, or the shards); lane(d) is d's index.
	lanes() []*run
	lane(d string) int
	// gate is the status Next checks before each pass over the lanes: a root's merged one
	// (a run's own is checked by its claim), read again with refresh.
	gate(ctx context.Context, now time.Time, refresh bool) Status
}

// zero reports a nil or zero Journal, whose every method refuses, never panics.
func (j *Journal) zero() bool { return j == nil || j.r == nil }

// impl is j's runner; a zero Journal's is a nil *run, which refuses with errZero.
func (j *Journal) impl() runner {
	if j.zero() {
		return (*run)(nil)
	}
	return j.r
}

// run is one run, or one shard of a parallel run: its storage, what it
// read last, and the request this Journal has in flight there.
type run struct {
	b           *store.Loc // the run's storage
	clock       clock.Clock
	plan        map[string]bool // file digests of the plan given to Open; nil when none
	pendingWait time.Duration   // see WithPendingWait
	slot        chan struct{}   // held from Begin to Complete/Backoff

	mu            sync.Mutex
	snap          *runread.Snapshot
	inflight      *record.MarkerFile // the marker this Journal holds, or nil
	markerVersion string             // the store's version of that marker: its conditional delete names it
	markerData    []byte             // the bytes of that marker
	markerHold    func()             // ends the store's hold (lock or lease) that shows it live
	failed        string             // a persistence failure; the Journal stays unresolved
	// started: by file digest, the upload this Journal began; a file with records of its
	// round that this Journal did not begin is unknown and refused (checkRequest).
	started map[string]*ownUpload
	claimed string // the file digest of Next's claim whose request has not begun (next.go)
	group   *root  // on a shard: its root
	shardNo int    // on a shard: its number
}

func (j *run) zero() bool { return j == nil || j.b == nil || j.slot == nil }

func openRun(b *store.Loc, cfg config, wait time.Duration, plan []string) *run {
	j := &run{b: b, clock: cfg.clock, pendingWait: wait, slot: make(chan struct{}, 1), started: map[string]*ownUpload{}}
	if plan != nil {
		j.plan = make(map[string]bool, len(plan))
		for _, d := range plan {
			j.plan[d] = true
		}
	}
	return j
}

func (j *run) route(context.Context, readrecovery.JournalRequest) *run { return j }
func (j *run) lanes() []*run                                           { return []*run{j} }
func (j *run) lane(string) int                                         { return 0 }
func (j *run) gate(context.Context, time.Time, bool) Status            { return Status{State: Clear} }

func (j *run) status(now time.Time) Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.statusLocked(now, false)
}

// ownUpload is an upload this Journal began: its parts and commit go on while every part
// was accepted; after a 429 only the re-send naming throttledBy (the entry's event digest)
// may go; closed (a commit, a failed part, a request never sent) sends nothing more.
type ownUpload struct {
	round                      int
	throttledBy, throttledName string
	closed                     bool
}

var _ readrecovery.Journal = (*Journal)(nil)

// Open opens the run in dir, creating one when dir does not exist or is empty: the
// directory (mode 0700) and its manifest run.json (0600) with backoff_version "1.0" and the
// plan digest. An existing run is verified ([InspectStore]); one that fails still opens,
// unresolved with a reason naming the file, never as clear. Open fails only when dir cannot
// be read or created, or on [ErrPlanMismatch]. The parent of dir must exist. With
// [Existing] it never creates.
func Open(dir string, opts ...Option) (*Journal, error) {
	cfg := newConfig(opts)
	return openLoc(context.Background(), store.LocOf(store.NewDir(cfg.fs, dir)), opts)
}

// Existing makes [Open] and [OpenStore] open only a run that exists: a
// missing or empty dir (a store without a run) is an error for which
// errors.Is(err, fs.ErrNotExist) holds, and nothing is written.
func Existing() Option { return optionFunc(func(c *config) { c.existing = true }) }

// openLoc opens the run kept in ub; ctx bounds the opening's lists and reads, never the
// Journal's later calls.
func openLoc(ctx context.Context, ub *store.Loc, opts []Option) (*Journal, error) {
	b := ub.With(ctx)
	cfg := newConfig(opts)
	dir := b.Name
	jr := &Journal{dir: dir, clock: cfg.clock, nx: nextState{plan: cfg.plan}}
	planFiles, planDigest, err := digestOfPlan(cfg.plan)
	if err != nil {
		return nil, err
	}
	if cfg.parallelSet && (cfg.parallel < record.MinParallel || cfg.parallel > record.MaxParallel) {
		return nil, fmt.Errorf("journal: WithParallel(%d): the shard count must be %d to %d", cfg.parallel, record.MinParallel, record.MaxParallel)
	}
	n := runread.RootParallel(b)
	if n > 0 && cfg.parallelSet && cfg.parallel != n {
		return nil, fmt.Errorf("journal: %s is a parallel run of %d shards, not WithParallel(%d)", store.EscapeName(dir), n, cfg.parallel)
	}
	if n > 0 || cfg.parallelSet {
		create := n == 0 && !cfg.existing
		if jr.r, err = openParallel(ctx, ub, create, cfg, planFiles, planDigest, cmp.Or(n, cfg.parallel)); err != nil {
			return nil, err
		}
		return jr, nil
	}
	if err := b.Nested(); err != nil {
		return nil, err
	}
	own := planFiles
	if cfg.plan == nil {
		own = nil
	}
	j := openRun(ub, cfg, cfg.pendingWait, own)
	s, err := j.openSnap(b, !cfg.existing, cfg.plan != nil, planFiles, planDigest, 0, nil)
	if err != nil {
		return nil, err
	}
	j.snap = s
	jr.r = j
	return jr, nil
}

// openSnap reads the run in b, creating it (with create) when it does not exist or its
// creation stopped before the manifest (another worker's under way, or a killed one: it
// is finished). given says planFiles and planDigest are the caller's plan: a run
// of another is [ErrPlanMismatch]. parallel and parts are create's, for a parallel
// run's root.
func (j *run) openSnap(b *store.Loc, create, given bool, planFiles []string, planDigest string, parallel int, parts func() error) (*runread.Snapshot, error) {
	s, err := runread.ScanRun(b, nil, j.clock.Now())
	if create && err == nil && unfinishedCreation(s) {
		err = runread.ErrNoRun
		if pl, ok := s.Cache[record.PlanName].(runread.PlanList); ok && !given {
			planFiles, planDigest = pl.Files, pl.Digest // the creation's own plan
		}
	}
	switch {
	case err == nil:
	case create && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, runread.ErrNoRun)):
		s, err = j.create(planFiles, planDigest, errors.Is(err, runread.ErrNoRun), parallel, parts)
		if err == nil && s == nil {
			// Another worker linked the manifest first: open its run.
			s, err = runread.ScanRun(b, nil, j.clock.Now())
		}
		if err != nil {
			return nil, fmt.Errorf("journal: create run %s: %w", store.EscapeName(b.Name), store.BareErr(err))
		}
	default:
		return nil, runread.DirError(b.Name, err)
	}
	if given && s.Manifest != nil && s.Manifest.PlanDigest != planDigest {
		return nil, fmt.Errorf("%w: %s records plan %s, not %s", ErrPlanMismatch, store.EscapeName(b.Name), s.Manifest.PlanDigest, planDigest)
	}
	return s, nil
}

// create makes a new run (docs/policy.md: shared-runs): the directory, plan.json, parts
// (a root's shards), and last the manifest, so that a run with a manifest is whole. A
// manifest that exists is another worker's: a nil snapshot, the caller reads it.
func (j *run) create(plan []string, planDigest string, exists bool, parallel int, parts func() error) (*runread.Snapshot, error) {
	planData, err := record.EncodePlanList(plan)
	if err != nil {
		return nil, err
	}
	if len(planData) > record.MaxPlanBytes {
		return nil, full("the plan of %d files needs %d bytes, over the %d-byte cap", len(plan), len(planData), record.MaxPlanBytes)
	}
	err = j.b.InitRun(exists)
	if err == nil {
		err = j.putPart(record.PlanName, planData)
	}
	if err == nil && parts != nil {
		err = parts()
	}
	if err != nil {
		return nil, err
	}
	data, digest, err := record.EncodeManifest(record.ManifestBody{BackoffVersion: record.BackoffVersion, PlanDigest: planDigest,
		CreatedAtUTC: j.clock.Now().Unix(), Parallel: parallel})
	if err != nil {
		return nil, err
	}
	if _, err := j.b.Put(record.ManifestName, data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, nil // another worker's: the caller reads it
		}
		return nil, err
	}
	mi := record.ManifestInfo{PlanDigest: planDigest, Genesis: digest, Parallel: parallel}
	s := runread.NewSnapshot()
	s.Files, s.Manifest, s.PlanFiles = 2, &mi, plan
	s.Cache[record.ManifestName] = mi
	s.Cache[record.PlanName] = runread.PlanList{Files: plan, Digest: planDigest}
	return s, nil
}

// putPart stores a creation's part exclusively; one that exists is no error when it
// holds exactly data, else [ErrPlanMismatch].
func (j *run) putPart(name string, data []byte) error {
	_, err := j.b.Put(name, data)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	had, _, ok := j.b.Read(nil, name, record.MaxPlanBytes)
	switch {
	case !ok:
		return fmt.Errorf("%s exists and cannot be read: %w", name, err)
	case !bytes.Equal(had, data):
		return fmt.Errorf("%w: %s records another plan (a creation with another plan)", ErrPlanMismatch, name)
	}
	return nil
}

// unfinishedCreation: no run.json and nothing but plan.json and temporary files, so no
// request was sent (every request follows the manifest).
func unfinishedCreation(s *runread.Snapshot) bool {
	return s.Manifest == nil && !slices.ContainsFunc(s.Listed, func(de store.ListedName) bool {
		_, tmp := record.ParseTempName(de.Name)
		return !de.Regular || (!tmp && de.Name != record.PlanName)
	})
}

// Dir returns the run directory, or for [OpenStore] the store's name (its
// String method, or "store").
func (j *Journal) Dir() string {
	if j == nil {
		return ""
	}
	return j.dir
}

// Admit reports whether a request of this run may access the network at now: nil for clear
// or elapsed, else a *RestrictedError with the status, or ctx's error (wrapped) when ctx
// has ended. It re-reads the run and never sleeps, except to wait [WithPendingWait] for
// another worker's marker. This Journal's own marker does not count (Begin orders
// requests).
func (j *Journal) Admit(ctx context.Context, now time.Time) error {
	switch {
	case j.zero():
		return &RestrictedError{Status: zeroStatus()}
	case ctx == nil:
		return errors.New("journal: admit: nil context")
	case ctx.Err() != nil:
		return fmt.Errorf("journal: not admitted: %w", ctx.Err())
	}
	return j.r.Admit(ctx, now)
}

// Begin records that a request is about to be sent: it waits for this Journal's request in
// flight, if any, creates pending-request.json (the request, the file digest of
// [WithUpload] or [WithUploadPart], the time, the worker's host and pid), and only then
// checks under it the status, the plan and the file's records; a refusal removes the
// marker. A parallel run's request goes to its file's (or URL's) shard.
//
// Errors: ctx's error, wrapped; a refusal wrapping [readrecovery.ErrReplayRefused] or
// [ErrPlanMismatch]; a *RestrictedError ([ErrPending] for another request's marker);
// anything else is a persistence failure. After nil the caller calls exactly one of
// Complete or Backoff.
func (j *Journal) Begin(ctx context.Context, req readrecovery.JournalRequest) error {
	switch {
	case j.zero():
		return &RestrictedError{Status: zeroStatus()}
	case ctx == nil:
		return errors.New("journal: begin: nil context")
	}
	if err := record.ValidRequest("", req.Method, req.URLDigest, req.Attempt, req.ResendOf); err != nil {
		return fmt.Errorf("journal: begin: %w", err)
	}
	return j.r.Begin(ctx, req)
}

// Backoff records a 429 of the request in flight as the next backoff entry of its run (or
// shard), with ra, timing (nil: none known; the run becomes unresolved) and the upload
// provenance, then removes the marker. It returns the entry's event digest. ctx does not
// cancel the write. Any error is a persistence failure.
func (j *Journal) Backoff(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome, ra readrecovery.RetryAfter, timing *readrecovery.RetryAfterTiming) (string, error) {
	return j.impl().route(ctx, req).Backoff(ctx, req, out, ra, timing)
}

// Complete ends the request in flight for every outcome but a 429 (which needs Backoff). A
// commit ([WithUpload]) first writes its receipt, a part ([WithUploadPart]) its part
// receipt; then the marker goes. An error means the receipt or the removal failed.
func (j *Journal) Complete(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome) error {
	return j.impl().route(ctx, req).Complete(ctx, req, out)
}

// PlanContinuation re-reads the run and classifies every file of files, which must be the
// run's plan ([ErrPlanMismatch]), as a [FileState]. Only a never-attempted file, or one
// reviewed for [DecisionReupload], gets Upload, and only with [NewApproval] while the
// status at now allows requests. In a run shared by workers another worker's marker makes
// its file in-flight, not the whole plan empty.
func (j *Journal) PlanContinuation(files []PlannedFile, approval Approval, now time.Time) (Continuation, error) {
	if files == nil {
		files = []PlannedFile{} // the empty plan, never RecordedPlan
	}
	return j.impl().continuation(files, approval, now)
}

// RecordedPlan classifies every file of the plan recorded in plan.json, as
// [Journal.PlanContinuation] does without a new approval. The run stores
// digests, never IDs: each FileDecision's ID is empty and Digest names the
// file. Without plan.json the continuation is Partial: the files records
// name. It fails when the manifest cannot be read.
func (j *Journal) RecordedPlan(now time.Time) (Continuation, error) {
	return j.impl().continuation(nil, NoNewApproval, now)
}

// Review records an operator's decision about a file classed unknown, in
// its shard's run. [DecisionReupload] makes the file eligible as a
// never-attempted one (a new approval is still needed); [DecisionSkip]
// means it is never sent. file is its [PlannedFile.ID] or its digest.
func (j *Journal) Review(ctx context.Context, file string, decision Decision, note string) (ReviewRecord, error) {
	return j.impl().Review(ctx, file, decision, note)
}

// ReviewPending resolves the run's dead pending marker; notBefore is Unix seconds, 0 for
// none. A live marker is refused. It is [Journal.ReviewPendingMarker] with no marker named.
func (j *Journal) ReviewPending(ctx context.Context, note string, notBefore int64) (ReviewRecord, error) {
	return j.impl().ReviewPendingMarker(ctx, "", note, notBefore)
}

// ReviewPendingMarker is [Journal.ReviewPending] of the marker named
// marker, in a parallel run "shard-KK/pending-request.json". An empty
// marker means the run's only dead one: a parallel run with several is
// refused with their names, one whose markers are all live is refused.
func (j *Journal) ReviewPendingMarker(ctx context.Context, marker, note string, notBefore int64) (ReviewRecord, error) {
	return j.impl().ReviewPendingMarker(ctx, marker, note, notBefore)
}

// ReviewRestriction bounds a backoff entry without timing by an operator's notBefore. In a
// parallel run entry names its shard ("shard-01/backoff-0001.json").
func (j *Journal) ReviewRestriction(ctx context.Context, entry, note string, notBefore int64) (ReviewRecord, error) {
	return j.impl().ReviewRestriction(ctx, entry, note, notBefore)
}

// Parallel returns n for a run created [WithParallel](n), else 0.
func (j *Journal) Parallel() int {
	if p, ok := j.impl().(*root); ok {
		return p.n
	}
	return 0
}

// Shard returns the shard (1 to n) that records the file with identity id in a run created
// [WithParallel](n), or 0 for a run without shards: the first 8 bytes of its
// [PlannedFile.Digest]'s SHA-256, big-endian, modulo n, plus 1.
func (j *Journal) Shard(id string) int {
	if j.zero() {
		return 0
	}
	return j.r.lanes()[j.r.lane(record.FileDigest(id))].shardNo
}

// statusLocked is the run's status (unresolved after a persistence failure); with
// ignorePending, the marker does not count: j.inflight != nil leaves out this
// Journal's own marker in flight, true every marker (Next and the run at a glance
// judge markers apart).
func (j *run) statusLocked(now time.Time, ignorePending bool) Status {
	if j.failed != "" {
		return Status{State: Unresolved, Reason: "persistence failure: " + j.failed}
	}
	return statusOf(j.snap, now, ignorePending)
}

// refreshLocked re-reads the listing and the files it does not know yet (records are
// immutable), so that another process's records count; ctx bounds the reads.
func (j *run) refreshLocked(ctx context.Context) {
	b := j.b.With(ctx)
	if j.inflight != nil && j.markerData != nil {
		b.Own = &store.LightMarker{Data: j.markerData, Version: j.markerVersion} // its bytes are known
	}
	s, err := runread.ScanRun(b, j.snap, j.clock.Now())
	if err != nil {
		s = runread.NewSnapshot()
		s.Findings.Add(".", "cannot read the run directory: %s", redact.Text(err.Error()))
	}
	j.snap = s
}

// refreshFinishing is refreshLocked, then finishDeadReview, read again when it wrote;
// for the calls that may write (Admit, Begin, the reviews).
func (j *run) refreshFinishing(ctx context.Context) {
	j.refreshLocked(ctx)
	if j.finishDeadReview() {
		j.refreshLocked(ctx)
	}
}

// finishDeadReview ends what a review that died or failed after its claim left: for the
// marker of a review whose worker is dead, or one a pending review resolved (its request
// is over), it writes a missing last head as its writer would have, then removes the
// marker, still the one read, which blocks every worker. A dead worker's claim that never
// sent is removed the same way (dead-claim-heals). It reports whether it wrote; a failure
// leaves the run as it was.
func (j *run) finishDeadReview() bool {
	s := j.snap
	if j.inflight != nil || j.failed != "" || !s.Pending || s.PendingDigest == "" || len(s.Findings) > 0 ||
		!(s.PendingResolved != "" || s.PendingUnsent || (s.PendingReview && s.PendingLive == store.HoldNone)) {
		return false
	}
	h := s.LastHead()
	if n := s.LastSeq; n > 0 && h == n-1 && !s.PendingUnsent {
		if err := j.putHead(n, record.Link{Name: s.Seq[n].Name, Digest: s.Seq[n].Digest}, nil); err != nil && !errors.Is(err, fs.ErrExist) {
			return false
		}
	} else if h != n {
		return false
	}
	return j.removeResolved(s) == nil
}

// Admit is [Journal.Admit] of a run or shard.
func (j *run) Admit(ctx context.Context, now time.Time) error {
	return j.waitOut(ctx, func(start time.Time, _ bool) error {
		j.refreshFinishing(ctx)
		if s := j.statusLocked(now.Add(max(j.clock.Now().Sub(start), 0)), j.inflight != nil); !s.Allows() {
			return &RestrictedError{Status: s}
		}
		return nil
	})
}

// waitOut calls try under j.mu (with the wait's start, and whether it is the first try)
// until it returns nil or a refusal not worth waiting out: worth it is another worker's
// marker, not shown dead by the store, seen for less than WithPendingWait. The wait is
// this process's own sight of the marker, never a time another machine wrote: a marker
// live at its end is still a request in flight, never judged dead.
func (j *run) waitOut(ctx context.Context, try func(start time.Time, first bool) error) error {
	start := j.clock.Now()
	seen, since := "", start // the marker last seen, and when it was first seen
	for first := true; ; first = false {
		j.mu.Lock()
		err := try(start, first)
		id := ""
		if err != nil && j.snap != nil {
			id = j.snap.PendingID
		}
		j.mu.Unlock()
		var re *RestrictedError
		if err == nil || j.pendingWait <= 0 || !errors.As(err, &re) || !errors.Is(err, ErrPending) || re.Status.abandoned {
			return err
		}
		now := j.clock.Now()
		if id != seen {
			seen, since = id, now
		}
		left := j.pendingWait - now.Sub(since)
		if left <= 0 {
			return err
		}
		if serr := j.clock.Sleep(ctx, min(left, pendingPoll+time.Duration(rand.Int64N(int64(pendingPoll))))); serr != nil {
			return fmt.Errorf("journal: not admitted while another worker's request was in flight: %w", serr)
		}
	}
}

// Begin is [Journal.Begin] of a run or shard.
func (j *run) Begin(ctx context.Context, req readrecovery.JournalRequest) error {
	if ok, err := j.beginClaimed(ctx, req); ok { // the file Next claimed (next.go)
		return err
	}
	if err := j.acquire(ctx); err != nil {
		return err
	}
	err := j.waitOut(ctx, func(_ time.Time, first bool) error { return j.beginLocked(ctx, req, first) })
	if err != nil {
		<-j.slot
	}
	return err
}

// acquire takes this Journal's one request slot, or returns ctx's error (wrapped) when
// ctx ends first (docs/policy.md: journal-slot-honours-deadline).
func (j *run) acquire(ctx context.Context) error {
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

// requestMarker is the marker of req; an upload's mutation names its file.
func requestMarker(ctx context.Context, req readrecovery.JournalRequest) record.MarkerFile {
	m := record.MarkerFile{
		BackoffVersion: record.BackoffVersion, Method: req.Method, URLDigest: req.URLDigest,
		Attempt: req.Attempt, ResendOf: req.ResendOf,
	}
	if u, ok := ctx.Value(uploadKey{}).(uploadMark); ok && httprule.IsMutation(req.Method) {
		m.FileDigest, m.Part = record.FileDigest(u.id), u.part
	}
	return m
}

// beginLocked claims req's marker and checks under it. A first check without the claim
// refuses early and writes nothing; a shard's first one uses what it read last (at its
// Admit or last request) and reads again only when that refuses.
func (j *run) beginLocked(ctx context.Context, req readrecovery.JournalRequest, first bool) error {
	m := requestMarker(ctx, req)
	cached := first && j.group != nil
	if !cached {
		j.refreshFinishing(ctx)
	}
	now := j.clock.Now()
	check := func() error { return cmp.Or(j.checkLimits(), j.checkRequest(m, now)) } // the first refusal
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
	var wg sync.WaitGroup
	if g := j.group; g != nil {
		// Under the claim every other shard too, read at the same time as this one: a
		// restriction any worker recorded blocks this request (parallel-shards).
		wg.Go(func() { others = g.others(ctx, j.shardNo, j.clock.Now()) })
	}
	j.refreshLocked(ctx)
	wg.Wait()
	return j.checkClaimed(m, others, nil)
}

// checkClaimed is the check under m's claim, after err if any: the request, then others
// (the other shards' status). A refusal removes the marker; an upload's begin is recorded.
func (j *run) checkClaimed(m record.MarkerFile, others Status, err error) error {
	if err == nil {
		err = j.checkRequest(m, j.clock.Now())
	}
	if err == nil && j.group != nil && !others.Allows() {
		err = &RestrictedError{Status: others}
	}
	if err != nil {
		return j.unclaim(err)
	}
	if m.FileDigest != "" {
		if err := j.beginRecord(m); err != nil {
			return err
		}
		round := j.snap.View(m.FileDigest, true).Round // this Journal's upload of the round
		if u := j.started[m.FileDigest]; u == nil || u.round != round {
			j.started[m.FileDigest] = &ownUpload{round: round}
		}
	}
	return nil
}

// checkLimits refuses a request that could need more than the run may hold: a request
// adds at most footprint files (its claim's marker included), or one entry.
func (j *run) checkLimits() error {
	s := j.snap
	files := s.Files
	if j.inflight != nil {
		files--
	}
	if n := len(s.Entries()); n >= record.MaxEntries {
		return full("%d backoff entries recorded, the most a run holds: entry %d could not be written, so nothing is sent", n, n+1)
	}
	if files+record.Footprint > record.MaxFiles {
		return full("%d files in the run; a request needs room for %d more of at most %d, so nothing is sent", files, record.Footprint, record.MaxFiles)
	}
	return nil
}

// checkRequest decides from the snapshot whether m's request may be sent at now; a part
// or commit of a file this run never sends again is refused.
func (j *run) checkRequest(m record.MarkerFile, now time.Time) error {
	s := j.snap
	if st := j.statusLocked(now, j.inflight != nil); !st.Allows() {
		return &RestrictedError{Status: st}
	}
	if m.FileDigest != "" {
		if (j.plan != nil && !j.plan[m.FileDigest]) || !s.InPlan(m.FileDigest) {
			return refuse(ErrPlanMismatch, "the upload names a file outside the plan")
		}
		switch fd := decide(s, m.FileDigest, NewApproval, Status{State: Clear}, true); fd.State {
		case FileAcked:
			return refuse(errReplay, "the file is acked: %s", fd.Reason)
		case FileReviewed:
			if fd.Decision == DecisionSkip {
				return refuse(errReplay, "the file: %s", fd.Reason)
			}
		case FileUnknown: // only this Journal's own upload of the round goes on
			v, u := s.View(m.FileDigest, true), j.started[m.FileDigest]
			if u == nil || u.round != v.Round || v.Receipt != nil || v.Bad != "" || u.closed {
				return refuse(errReplay, "the file is unknown: %s", fd.Reason)
			}
			if u.throttledBy != "" && (m.Attempt != 2 || m.ResendOf != u.throttledBy) {
				return refuse(errReplay, "the file is unknown: %s: its upload met 429; only the transport's queue-429 re-send of that request may follow, never another send", u.throttledName)
			}
		}
	}
	if m.ResendOf != "" && !hasEntry(s, m.ResendOf, m.FileDigest) {
		return errors.New("journal: begin: resend_of names no backoff entry of this run for this file")
	}
	return nil
}

// claim creates the marker m exclusively and durably; this Journal then holds it
// (inflight). An existing marker is another request's: a *RestrictedError wrapping
// ErrPending, nothing written. Any other failure is a persistence failure.
func (j *run) claim(m record.MarkerFile) error {
	m.Host, m.PID = workerHost, workerPID
	data, err := record.MarshalLine(m)
	if err != nil {
		return err
	}
	version, hold, err := j.b.CreateMarker(data)
	switch {
	case errors.Is(err, fs.ErrExist): // another request's: nothing of this Journal failed
		reason := record.MarkerName + ": " + runread.PendingProblem
		if r := j.snap.PendingResolved; r != "" {
			reason = record.MarkerName + ": resolved by " + r + " but still present: `journal review --pending` again removes it"
		}
		return &RestrictedError{Status: Status{State: Unresolved, Reason: reason, cause: ErrPending}}
	case err != nil:
		j.fail("create pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: begin: %w", err)
	}
	j.markerVersion, j.markerData, j.markerHold = version, data, hold
	j.snap.Pending, j.snap.PendingFile, j.snap.Files = true, m.FileDigest, j.snap.Files+1
	j.inflight = &m
	return nil
}

// unclaim removes the marker of a claim that sends nothing, a refused request's or
// (refusal nil) Next's claim that no request adopted, and returns the refusal, or a
// persistence failure when the marker cannot be removed.
func (j *run) unclaim(refusal error) error {
	j.inflight = nil
	switch err := j.clearMarker(); {
	case err != nil && refusal == nil:
		return fmt.Errorf("journal: next: the claim's marker could not be removed: %w", store.BareErr(err))
	case err != nil:
		return fmt.Errorf("journal: begin: refused (%v), and the marker could not be removed: %w", refusal, store.BareErr(err))
	}
	return refusal
}

// release ends the hold of this Journal's marker once its request or review is over: a
// marker left by a failed write is then dead for every other process, for a pending review.
func (j *run) release() {
	if j.markerHold != nil {
		j.markerHold()
		j.markerHold = nil
	}
}

// fail records a persistence failure: the Journal is unresolved from now on.
func (j *run) fail(why string) {
	if j.failed == "" {
		j.failed = why
		if j.group != nil {
			j.group.noteFailure(j.shardNo, why)
		}
	}
}

// putLinked seals body as the run's next record, of kind and named name, stores it
// exclusively and adds it to the snapshot, then writes the head naming it (unless its
// request's begun head stands for it) and removes the heads it replaces. linked reports
// whether the record exists: false means nothing was written; true with an error, in
// the run but not durably (the head's error: the marker stays, unresolved until a review).
func (j *run) putLinked(name, kind string, body any) (r runread.Rec, linked bool, err error) {
	s := j.snap
	r.Name = name
	seq, prev := s.NextLink()
	switch {
	case seq == 0:
		return r, false, errors.New("run.json is unusable: nothing is written")
	case seq > record.MaxRunSeq:
		// The one guard of the numbering limits (parts of a file, reviews: each is a record of
		// the sequence), never reached: the file limit stops a run long before.
		return r, false, full("record %d is beyond the %d a run's sequence holds", seq, record.MaxRunSeq)
	}
	data, digest, err := record.Seal(kind, seq, prev, body)
	if err != nil {
		return r, false, err
	}
	r.Loaded = runread.Loaded{Env: record.Env{Seq: seq, Prev: prev, Digest: digest}, Body: body}
	linked, err = j.b.Put(name, data)
	s.Gen = runread.ScanGen.Add(1) // what this Journal wrote is news
	if !linked {
		return r, false, err
	}
	s.Wrote(r)
	if err != nil {
		return r, true, err
	}
	if b := s.Begun; b != nil && b.Seq == seq {
		s.Begun = nil
		return r, true, nil
	}
	return r, true, j.putHead(seq, record.Link{Name: name, Digest: digest}, nil)
}

// putHead writes head-seq after prev, the run's last record (a begun head when begun is
// not nil), then removes the heads it replaces.
func (j *run) putHead(seq int, prev record.Link, begun *record.BegunRequest) error {
	s := j.snap
	body := &record.HeadBody{Begun: begun}
	hd, digest, err := record.Seal(record.KindHead, seq, prev, body)
	if err != nil {
		return err
	}
	hn := record.HeadName(seq)
	hl, err := j.b.Put(hn, hd)
	if hl {
		e := record.Env{Seq: seq, Prev: prev, Digest: digest}
		s.Cache[hn] = runread.Loaded{Env: e, Body: body} // immutable: the next scan need not read it
		s.Files++
		if begun != nil {
			s.Begun = &runread.BegunHead{Name: hn, Env: e, Req: *begun}
		}
		older := s.Heads
		s.Heads = []string{hn}
		for _, o := range older {
			if o == hn {
				continue
			}
			if err := j.b.RemoveHead(o); err == nil || errors.Is(err, fs.ErrNotExist) {
				s.Files--
			} else {
				s.Heads = append(s.Heads, o) // removed by a later write
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", hn, err)
	}
	return nil
}

// beginRecord writes an upload request's begun head under its claim, before it is sent,
// so that a marker removed by hand is a finding, never a way to make the file eligible.
// A head not written ends the claim; one written but not durably keeps the marker.
func (j *run) beginRecord(m record.MarkerFile) error {
	seq, prev := j.snap.NextLink()
	err := j.putHead(seq, prev, &record.BegunRequest{Method: m.Method, URLDigest: m.URLDigest, FileDigest: m.FileDigest,
		Part: m.Part, Attempt: m.Attempt, ResendOf: m.ResendOf, BegunAtUTC: m.BegunAtUTC})
	if err == nil {
		return nil
	}
	j.fail("write " + record.HeadName(seq) + ": " + redact.Text(err.Error()))
	err = fmt.Errorf("journal: begin: %w", store.BareErr(err))
	if j.snap.Begun == nil {
		return j.unclaim(err)
	}
	j.inflight = nil
	j.release() // nothing is sent: the marker is dead for every other process
	return err
}

// clearMarker removes this Journal's marker (conditionally on its version, where the
// store has versions); a failure is a persistence failure.
func (j *run) clearMarker() error {
	err := j.b.RemoveMarker(j.markerVersion)
	j.release() // after the removal: the marker is never unheld while present and in flight
	if err != nil {
		j.fail("remove pending-request.json: " + redact.Text(err.Error()))
		return err
	}
	j.markerVersion, j.markerData = "", nil
	j.snap.Gen = runread.ScanGen.Add(1)
	j.snap.Pending, j.snap.PendingFile, j.snap.PendingID = false, "", ""
	j.snap.Files--
	return nil
}

// endRequest runs end on the request in flight, under mu, and then finishes it:
// the next Begin may proceed. A request that differs from the one Begin
// recorded is a persistence failure, finished at once.
func (j *run) endRequest(req readrecovery.JournalRequest, end func(m *record.MarkerFile) error) error {
	if j.zero() {
		return errZero
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m := j.inflight
	if m == nil {
		return errors.New("journal: no request in flight (Begin was not called)")
	}
	defer func() { // the request is over: the next Begin may proceed
		j.inflight = nil
		j.release()
		<-j.slot
	}()
	if m.Method != req.Method || m.URLDigest != req.URLDigest || m.Attempt != req.Attempt || m.ResendOf != req.ResendOf {
		j.fail("request differs from the one begun")
		return errors.New("journal: the request differs from the one Begin recorded")
	}
	return end(m)
}

// Backoff is [Journal.Backoff] of a run or shard; an entry written before
// a failure still has its digest returned with the error.
func (j *run) Backoff(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome, ra readrecovery.RetryAfter, timing *readrecovery.RetryAfterTiming) (digest string, err error) {
	err = j.endRequest(req, func(m *record.MarkerFile) error {
		s := j.snap
		e := record.EntryBody{
			BackoffVersion: record.BackoffVersion, Sequence: len(s.Entries()) + 1, PlanDigest: s.PlanDigest(),
			Method: req.Method, URLDigest: req.URLDigest, RequestID: redact.ID(out.RequestID), Status: out.StatusCode,
			RetryAfter: record.RetryAfterJSON{Kind: string(ra.Kind), Value: ra.Value},
			Provenance: record.Provenance{FileDigest: m.FileDigest, Attempt: req.Attempt, ResendOf: req.ResendOf, Part: m.Part},
		}
		if timing != nil && record.Representable(timing) {
			// A timing beyond the shared bound is no timing (the run is unresolved), never a refusal.
			e.Timing = &record.TimingJSON{ReceivedAtUTC: timing.ReceivedAtUTC, NotBeforeUTC: timing.NotBeforeUTC, ServerDelaySeconds: timing.ServerDelaySeconds}
		}
		if e.Sequence > record.MaxEntries {
			j.fail("entry limit")
			return full("entry %d is beyond the %d a run holds", e.Sequence, record.MaxEntries)
		}
		if err := record.ValidEntry(e); err != nil {
			j.fail("invalid backoff entry: " + err.Error())
			return fmt.Errorf("journal: backoff: %w", err)
		}
		name := record.EntryName(e.Sequence)
		ev, linked, err := j.writeRecord(name, record.KindEntry, &e)
		if u := j.started[m.FileDigest]; m.FileDigest != "" && u != nil {
			if linked {
				u.throttledBy, u.throttledName = ev.Digest, name
			} else {
				u.closed = true
			}
		}
		if linked {
			digest = ev.Digest
			if why := record.Untimed(e); why != "" {
				s.Findings.Add(name, "%s", why)
			}
		}
		if err == nil { // linked and durable: the request is over
			err = j.clearMarker()
		}
		if err != nil {
			return fmt.Errorf("journal: backoff: %w", err)
		}
		return nil
	})
	return digest, err
}

// writeRecord is putLinked of the request in flight; a failure is a persistence failure.
func (j *run) writeRecord(name, kind string, body any) (record.Env, bool, error) {
	r, linked, err := j.putLinked(name, kind, body)
	if err != nil {
		j.fail("write " + name + ": " + redact.Text(err.Error()))
	}
	return r.Env, linked, err
}

// Complete is [Journal.Complete] of a run or shard.
func (j *run) Complete(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome) error {
	return j.endRequest(req, func(m *record.MarkerFile) error {
		if httprule.IsThrottled(out.StatusCode) { // it would lose its restriction: keep the marker
			j.fail("a 429 was completed without its backoff entry")
			return errors.New("journal: complete: a 429 must be recorded with Backoff")
		}
		s := j.snap
		ok2xx := httprule.IsSuccess(out.StatusCode)
		var err error
		if u := j.started[m.FileDigest]; m.FileDigest != "" && u != nil {
			// A part's 2xx continues the upload; any other outcome ends what this Journal sends.
			u.throttledBy, u.throttledName = "", ""
			u.closed = u.closed || !m.Part || !ok2xx
		}
		switch {
		case m.FileDigest != "" && m.Part:
			p := record.PartBody{
				PlanDigest: s.PlanDigest(), FileDigest: m.FileDigest, Part: len(s.PartsOf(m.FileDigest)) + 1,
				Method: req.Method, URLDigest: req.URLDigest, Attempt: req.Attempt, ResendOf: req.ResendOf,
				Status: out.StatusCode, Accepted: ok2xx, RequestID: redact.ID(out.RequestID),
				ETag: redact.ETag(out.ETag), TransportError: redact.Text(out.TransportError),
				RecordedAtUTC: j.clock.Now().Unix(),
			}
			_, _, err = j.writeRecord(record.PartName(m.FileDigest, p.Part), record.KindPart, &p)
		case m.FileDigest != "":
			round := s.View(m.FileDigest, true).Round
			r := record.ReceiptBody{
				PlanDigest: s.PlanDigest(), FileDigest: m.FileDigest, Method: req.Method, URLDigest: req.URLDigest,
				Attempt: req.Attempt, ResendOf: req.ResendOf, Status: out.StatusCode, ACK: ok2xx,
				RequestID: redact.ID(out.RequestID), ETag: redact.ETag(out.ETag),
				TransportError: redact.Text(out.TransportError), RecordedAtUTC: j.clock.Now().Unix(),
			}
			if round > 1 {
				r.Round = round
			}
			_, _, err = j.writeRecord(record.ReceiptNameRound(m.FileDigest, round), record.KindReceipt, &r)
		}
		if err != nil {
			return fmt.Errorf("journal: receipt: %w", store.BareErr(err))
		}
		if err := j.clearMarker(); err != nil {
			return fmt.Errorf("journal: complete: %w", store.BareErr(err))
		}
		return nil
	})
}

type uploadKey struct{}

// uploadMark is what WithUpload and WithUploadPart put in a context.
type uploadMark struct {
	id   string
	part bool
}

// WithUpload returns a copy of ctx whose request commits the upload of the planned file
// with identity id ([PlannedFile.ID]): the request whose 2xx is the file's ACK (a
// single-request upload, or the last request of a multi-request one: Blob Put Block List,
// the last Files Put Range). Its marker, backoff entries and receipt name the file's
// [PlannedFile.Digest]. An empty id returns ctx unchanged.
func WithUpload(ctx context.Context, id string) context.Context {
	return withMark(ctx, uploadMark{id: id})
}

// WithUploadPart returns a copy of ctx whose request is one part of the upload of the
// planned file with identity id (Blob Put Block, Files Create or Put Range before the
// commit). A part is journaled like the commit and leaves a part receipt, but its 2xx is
// never the file's ACK: a file with parts and no committed ACK is unknown. An empty id
// returns ctx unchanged.
func WithUploadPart(ctx context.Context, id string) context.Context {
	return withMark(ctx, uploadMark{id: id, part: true})
}

func withMark(ctx context.Context, u uploadMark) context.Context {
	if u.id == "" {
		return ctx
	}
	return context.WithValue(ctx, uploadKey{}, u)
}

// hasEntry reports whether an entry has event digest d and, when both name
// a file, the same file.
func hasEntry(s *runread.Snapshot, d, file string) bool {
	return slices.ContainsFunc(s.Entries(), func(e *runread.Rec) bool {
		f := e.Entry().Provenance.FileDigest
		return e.Digest == d && (f == "" || file == "" || f == file)
	})
}

const (
	// pendingPoll is how often [WithPendingWait] looks again for another
	// worker's marker to go.
	pendingPoll = 25 * time.Millisecond
	// deadPoll (plus up to as much again) is how often [Journal.Next] reads the run
	// again while it waits for a dead worker's upload's review (dead-upload-waits).
	deadPoll = 500 * time.Millisecond
)

// Store is where a run's records live (shared-runs): a flat set of named,
// immutable objects plus the one pending marker; formats, digests, the chain
// and the limits are the journal's. [DirStore] is the local directory;
// github.com/readrecovery/readrecovery/azure/blobjournal keeps runs in Azure
// Blob Storage. A Store must not retry a write in a way that could store an
// object twice, nor send through the transport of the run it records: a
// failure is a persistence failure, never a wait.
//
// The journal finds two optional methods by a type assertion:
//
//	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
//	EnclosingRun(ctx context.Context) (string, error)
//
// ListPrefix lists only the whole names that start with prefix: a parallel
// run's shards ([WithParallel]) live under shard-01/ … shard-NN/ of their
// root's Store, each listed by ListPrefix, else by List of the root,
// filtered. EnclosingRun returns the name of the run this one lies inside
// (Blob: a prefix under one holding a run.json), or "" when none;
// [OpenStore] refuses such a run (runs never nest).
//
// Its methods, as package store declares them:
//
//	type Store interface {
//		// Create stores data under name only if no object of that name exists
//		// (O_EXCL; Blob: If-None-Match: *), durably before it returns, and
//		// returns its version (an ETag; "" without versions). When name exists
//		// it changes nothing and errors.Is(err, fs.ErrExist) holds.
//		Create(ctx context.Context, name string, data []byte) (version string, err error)
//		// Read returns name's content and version, reading at most limit+1
//		// bytes so that a larger object shows as such without being read whole.
//		// A missing name: errors.Is(err, fs.ErrNotExist).
//		Read(ctx context.Context, name string, limit int64) (data []byte, version string, err error)
//		// List returns the names of at most limit objects of the run, in any
//		// order; an empty run gives none and no error.
//		List(ctx context.Context, limit int) ([]string, error)
//		// Remove deletes name only while its version is still version (Blob:
//		// If-Match; ignored without versions). The journal removes only the
//		// pending marker and a head a newer head replaced.
//		Remove(ctx context.Context, name, version string) error
//		// Hold keeps the marker name this process just created (version from
//		// Create) live, as Live tells every process, until release, however long
//		// its request and whatever any clock says (marker-liveness); a dead
//		// process's hold ends by the store's own means (the kernel's lock, the
//		// service's lease). The journal releases after the marker's removal; a
//		// failed Hold is a persistence failure (the marker is removed again, nothing is sent).
//		Hold(ctx context.Context, name, version string) (release func(), err error)
//		// Live reports whether a process holds name now, and its version (""
//		// without versions). A marker is live from its Create on (a store whose
//		// hold begins at Hold counts the moments between as live by its own
//		// means). A missing name: errors.Is(err, fs.ErrNotExist); any other error
//		// means the store cannot tell (no locks): the marker counts as live.
//		Live(ctx context.Context, name string) (live bool, version string, err error)
//	}
type Store = store.Store

// DirStore returns the local directory dir as a [Store], written with the
// durable-write sequence (immutable-chained-entries). [Open](dir) is
// [OpenStore] of DirStore(dir), with the checks only a directory has
// (private-run-directory, hostile-directories).
func DirStore(dir string) Store { return store.NewDir(fsys.OS{}, dir) }

// OpenStore opens the run kept in st as [Open] does a directory
// (OpenStore(ctx, DirStore(dir), opts...) is Open(dir, opts...)): it
// creates a new run when st holds nothing (never with [Existing]), or opens
// and verifies the existing one. Any number of processes may open, or
// create together, the same run (docs/policy.md: shared-runs). ctx bounds
// every list and read of the opening (its writes, when it creates the run,
// are detached under their own bound), never the Journal's later calls.
func OpenStore(ctx context.Context, st Store, opts ...Option) (*Journal, error) {
	switch {
	case st == nil:
		return nil, errors.New("journal: nil Store")
	case ctx == nil:
		return nil, errors.New("journal: open: nil context")
	case ctx.Err() != nil:
		return nil, fmt.Errorf("journal: open: %w", ctx.Err())
	}
	return openLoc(ctx, store.LocOf(st), opts)
}

// WithPendingWait lets [Journal.Admit] and [Journal.Begin] wait, up to d,
// for the pending marker of another worker's request to go (docs/policy.md:
// shared-runs), instead of refusing at once with an unresolved status
// ([ErrPending]). The wait honours the caller's context. A marker whose
// worker the store shows dead (marker-liveness) ends the wait at once; one
// still live after d is refused as a request in flight, never judged dead
// by its age. Default: 0, no wait. A negative d is ignored.
func WithPendingWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.pendingWait = d
		}
	})
}

// Finding is one problem of a run directory, found by [InspectStore] or by the
// verification [Open] performs. Any finding makes the run unresolved. File is the file's
// name inside the run directory, or "." for the directory itself; Problem says what is
// wrong, in a few words. Its String method returns "file: problem", the line
// `readrecovery journal verify` prints; a file name that is not plain printable ASCII (a
// newline, an escape sequence, a quote, a space, anything else) is printed quoted with Go
// escapes, so that no name can forge a line or reach a terminal raw.
type Finding = store.Finding

// Summary is what [InspectStore] found in a run. Entries, Receipts, Parts and Reviews count
// the records that passed their own checks: backoff entries, commit receipts, part receipts
// and reviews. PlannedFiles is the number of files in plan.json, or -1 for a run written
// before plan.json existed. Findings are Verify's findings; none means the run verifies
// clean. Leftovers are the temporary files of interrupted writes older than a minute:
// neither records nor findings (the pending marker or a missing manifest shows the
// interruption), but what a crash left, for an operator.
type Summary = runread.Summary

// InspectStore checks the run kept in st (a directory: [DirStore]) without
// changing it, and returns in Summary.Findings every finding, one per
// problem, as docs/policy.md ("The journal in detail") lists them (the
// location, every file, the chain and a pending marker), and in Summary the
// counts of what the run holds (`readrecovery journal verify`'s "ok" line). No findings means the run can never be unresolved but by
// clock regression, which depends on the time of the question (see
// [Journal.Status]). The error is non-nil only when the run itself cannot
// be read: it does not exist or holds no run (errors.Is(err,
// fs.ErrNotExist)), is not a directory, or cannot be listed.
func InspectStore(ctx context.Context, st Store) (Summary, error) {
	switch {
	case st == nil:
		return Summary{}, errors.New("journal: nil Store")
	case ctx == nil:
		return Summary{}, errors.New("journal: inspect: nil context")
	case ctx.Err() != nil:
		return Summary{}, fmt.Errorf("journal: inspect: %w", ctx.Err())
	}
	return runread.Inspect(store.LocOf(st).With(ctx))
}
