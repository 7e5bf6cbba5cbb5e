package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Errors of the journal. They are wrapped, never returned bare: test for
// them with errors.Is.
var (
	// ErrCorrupt means the run directory failed verification: a missing,
	// unreadable, oversized, edited, truncated, reordered or unexpected
	// file, a broken chain, or too many files. Such a run is unresolved;
	// [Journal.Admit] and [Journal.Begin] return a *RestrictedError that
	// wraps ErrCorrupt too.
	ErrCorrupt = errors.New("journal: run failed verification")

	// ErrRestricted is wrapped by the *RestrictedError of a run whose state
	// forbids network access (waiting or unresolved).
	ErrRestricted = errors.New("journal: run restricted")

	// ErrLimit means a request could need a backoff entry or a file beyond
	// the limits ([MaxEntries] entries, [MaxFiles] files): Begin refuses it
	// before any network access.
	ErrLimit = errors.New("journal: run limit reached")

	// ErrPending means pending-request.json already exists: an earlier
	// request never finished (or another process is sending one). The run
	// is unresolved.
	ErrPending = errors.New("journal: unfinished request pending")

	// ErrPlanMismatch means the plan given to [Open] or
	// [Journal.PlanContinuation] is not the plan the run recorded, or a
	// request names a file outside the plan.
	ErrPlanMismatch = errors.New("journal: plan does not match the run")

	// ErrReplay means a request names a file whose upload outcome is
	// already recorded (a receipt): it is never sent again.
	ErrReplay = errors.New("journal: upload outcome already recorded")
)

// RestrictedError is the error of [Journal.Admit] and [Journal.Begin] for a
// run that is waiting or unresolved. errors.Is(err, ErrRestricted) holds;
// for an unresolved run errors.Is also finds ErrCorrupt (failed
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
	plan  []PlannedFile
	clock clock.Clock
	fs    fsys.FS
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
// [PlanDigest] in its manifest; an existing run must have recorded the same
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

// withClock and withFS are the internal seams of the tests (SPEC R41): not
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
	dir   string
	fs    fsys.FS
	clock clock.Clock
	plan  map[string]bool // file digests of the plan given to Open; nil when none

	slot chan struct{} // held from Begin to Complete/Backoff

	mu       sync.Mutex
	snap     *snapshot
	inflight *markerFile // the marker this Journal holds, or nil
	failed   string      // a persistence failure; the Journal stays unresolved
}

var _ readrecovery.Journal = (*Journal)(nil)

// Open opens the run in dir, creating a new one when dir does not exist or
// is an empty directory: the directory (mode 0700) and a run manifest
// run.json (0600) declaring backoff_version "1.0" and the plan digest. An
// existing run is verified (see [Verify]); a run that fails verification
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
	j := &Journal{dir: dir, fs: cfg.fs, clock: cfg.clock, slot: make(chan struct{}, 1)}
	planDigest, err := PlanDigest(cfg.plan)
	if err != nil {
		return nil, err
	}
	if cfg.plan != nil {
		j.plan = make(map[string]bool, len(cfg.plan))
		for _, f := range cfg.plan {
			j.plan[FileDigest(f.ID)] = true
		}
	}
	s, err := scan(j.fs, dir, nil)
	switch {
	case err == nil:
	case create && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoRun)):
		if s, err = j.create(planDigest, errors.Is(err, errNoRun)); err != nil {
			return nil, fmt.Errorf("journal: create run %s: %w", dir, err)
		}
	default:
		return nil, dirError(dir, err)
	}
	if cfg.plan != nil && s.manifest != nil && s.manifest.planDigest != planDigest {
		return nil, fmt.Errorf("%w: %s records plan %s, not %s", ErrPlanMismatch, dir, s.manifest.planDigest, planDigest)
	}
	j.snap = s
	return j, nil
}

// create makes a new run: the directory (or, when exists, the empty
// directory made private), the parent's directory entry durable, then the
// manifest written atomically.
func (j *Journal) create(planDigest string, exists bool) (*snapshot, error) {
	if exists {
		if err := j.fs.Chmod(j.dir, 0o700); err != nil {
			return nil, err
		}
	} else {
		if err := j.fs.Mkdir(j.dir, 0o700); err != nil {
			return nil, err
		}
		if err := j.fs.SyncDir(filepath.Dir(j.dir)); err != nil {
			return nil, err
		}
	}
	mb := manifestBody{BackoffVersion: BackoffVersion, PlanDigest: planDigest, CreatedAtUTC: j.clock.Now().Unix()}
	data, digest, err := encodeManifest(mb)
	if err != nil {
		return nil, err
	}
	if _, err := j.writeAtomic(manifestName, data); err != nil {
		return nil, err
	}
	mi := manifestInfo{version: BackoffVersion, planDigest: planDigest, genesis: digest}
	return &snapshot{
		files:         1,
		manifest:      &mi,
		receipts:      map[string]receiptFile{},
		namedPrefixes: map[string]string{},
		cache:         map[string]any{manifestName: mi},
	}, nil
}

// Dir returns the run directory.
func (j *Journal) Dir() string { return j.dir }

// Status returns the run's state at now (SPEC R35–R37), from what Open or
// the latest Admit, Begin, Complete, Backoff or PlanContinuation read: it
// never touches the disk and never sleeps. A pending marker, including the
// one of a request of this Journal still in flight, makes it unresolved.
// After a persistence failure the Journal stays unresolved; open the run
// again to re-read it.
func (j *Journal) Status(now time.Time) Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.statusLocked(now, false)
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
func (j *Journal) refreshLocked() {
	s, err := scan(j.fs, j.dir, j.snap)
	if err != nil {
		s = &snapshot{receipts: map[string]receiptFile{}, namedPrefixes: map[string]string{}, cache: map[string]any{}}
		s.addFinding(".", "cannot read the run directory: %s", redact.Text(err.Error()))
	}
	j.snap = s
}

// Admit reports whether a request of this run may access the network at
// now: nil only when the status is clear or elapsed, else a
// *RestrictedError with the status (SPEC R36). It re-reads the directory
// first. It never sleeps. The marker of this Journal's own request in
// flight does not count here (Begin orders requests).
func (j *Journal) Admit(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshLocked()
	if s := j.statusLocked(now, true); !s.Allows() {
		return &RestrictedError{Status: s}
	}
	return nil
}

// Begin records that a request is about to be sent: it creates
// pending-request.json exclusively (O_EXCL, 0600) with the method, URL
// digest, attempt, resend-of digest, file identity digest (see
// [WithUpload]) and the clock's time, fsyncs it and the directory (SPEC
// R31). Before that it waits for this Journal's request in flight, if any
// (honouring ctx), re-reads the directory, and refuses, before any network
// access: a run at its limits ([ErrLimit]: 200 entries, or fewer than three
// free files of 1003), a restricted run (*RestrictedError), an existing
// marker ([ErrPending]), a file outside the plan ([ErrPlanMismatch]) or
// with a recorded outcome ([ErrReplay]). Any other error is a persistence
// failure (R38): the Journal stays unresolved. After a nil error the
// caller must call exactly one of Complete or Backoff.
func (j *Journal) Begin(ctx context.Context, req readrecovery.JournalRequest) error {
	if err := validRequest(req.Method, req.URLDigest, req.Attempt, req.ResendOf); err != nil {
		return fmt.Errorf("journal: begin: %w", err)
	}
	select {
	case j.slot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	err := j.beginLocked(ctx, req)
	if err != nil {
		<-j.slot
	}
	return err
}

func (j *Journal) beginLocked(ctx context.Context, req readrecovery.JournalRequest) error {
	j.refreshLocked()
	s := j.snap
	if len(s.entries) >= MaxEntries {
		return fmt.Errorf("%w: %d backoff entries recorded; entry %d could not be written", ErrLimit, len(s.entries), len(s.entries)+1)
	}
	if s.files+footprint > MaxFiles {
		return fmt.Errorf("%w: %d files in the run directory; a request needs room for %d more of at most %d", ErrLimit, s.files, footprint, MaxFiles)
	}
	now := j.clock.Now()
	if st := j.statusLocked(now, false); !st.Allows() {
		return &RestrictedError{Status: st}
	}
	m := markerFile{
		BackoffVersion: BackoffVersion, Method: req.Method, URLDigest: req.URLDigest,
		Attempt: req.Attempt, ResendOf: req.ResendOf, BegunAtUTC: now.Unix(),
	}
	if id, ok := UploadFrom(ctx); ok && isMutation(req.Method) {
		m.FileDigest = FileDigest(id)
		if j.plan != nil && !j.plan[m.FileDigest] {
			return fmt.Errorf("%w: the upload names a file outside the plan", ErrPlanMismatch)
		}
		if r, ok := s.receipts[m.FileDigest]; ok {
			return fmt.Errorf("%w: %s (status %d)", ErrReplay, receiptName(m.FileDigest), r.Status)
		}
	}
	if req.ResendOf != "" && !s.hasEntry(req.ResendOf, m.FileDigest) {
		return errors.New("journal: begin: resend_of names no backoff entry of this run for this file")
	}
	data, err := marshalLine(m)
	if err != nil {
		return err
	}
	if err := j.writeMarker(data); err != nil {
		return err
	}
	s.pending, s.pendingFile, s.files = true, m.FileDigest, s.files+1
	j.inflight = &m
	return nil
}

// hasEntry reports whether an entry has event digest d and, when both name
// a file, the same file.
func (s *snapshot) hasEntry(d, file string) bool {
	for _, e := range s.entries {
		if e.EventDigest == d {
			f := e.Provenance.FileDigest
			return f == "" || file == "" || f == file
		}
	}
	return false
}

// writeMarker creates the marker exclusively and makes it durable. A
// failure after the creation removes it again (nothing was sent) when it
// can; the Journal stays unresolved either way.
func (j *Journal) writeMarker(data []byte) error {
	path := filepath.Join(j.dir, markerName)
	f, err := j.fs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			j.fail("pending-request.json already exists")
			return fmt.Errorf("%w: %s", ErrPending, markerName)
		}
		j.fail("create pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: begin: %w", err)
	}
	err = writeSyncClose(f, data)
	if err == nil {
		err = j.fs.SyncDir(j.dir)
		if err == nil {
			return nil
		}
	}
	j.fail("write pending-request.json: " + redact.Text(err.Error()))
	if j.fs.Remove(path) == nil {
		_ = j.fs.SyncDir(j.dir)
	}
	return fmt.Errorf("journal: begin: %w", err)
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
	}
}

// writeAtomic writes name through a temporary file in the same directory:
// create name.tmp (O_EXCL, 0600) → write → fsync → close → link to name
// (which fails if name exists) → fsync the directory → remove name.tmp →
// fsync the directory. linked reports whether name exists durably. On a
// failure before the link the temporary file is removed when possible.
func (j *Journal) writeAtomic(name string, data []byte) (linked bool, err error) {
	final := filepath.Join(j.dir, name)
	tmp := final + tempSuffix
	f, err := j.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if err := writeSyncClose(f, data); err != nil {
		_ = j.fs.Remove(tmp)
		return false, err
	}
	if err := j.fs.Link(tmp, final); err != nil {
		_ = j.fs.Remove(tmp)
		return false, err
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		return false, err
	}
	if err := j.fs.Remove(tmp); err != nil {
		return true, err
	}
	return true, j.fs.SyncDir(j.dir)
}

// clearMarker removes the marker and fsyncs the directory.
func (j *Journal) clearMarker() error {
	if err := j.fs.Remove(filepath.Join(j.dir, markerName)); err != nil {
		return err
	}
	j.snap.pending, j.snap.pendingFile = false, ""
	j.snap.files--
	return j.fs.SyncDir(j.dir)
}

// finish ends the request in flight: the marker is this Journal's no more
// and the next Begin may proceed.
func (j *Journal) finish() {
	j.inflight = nil
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
// then removes pending-request.json and fsyncs the directory (SPEC R32,
// R33). The entry binds the plan digest, the previous entry's digest, the
// method, URL digest, sanitized request ID and status of out, ra, timing
// (nil: none known; the run becomes unresolved) and the upload provenance;
// it returns the entry's event digest. ctx does not cancel the write.
//
// Any error is a persistence failure (R38): the marker stays, the Journal
// is unresolved, and the caller must neither wait nor re-send. When the
// entry itself was written before the failure, its digest is returned with
// the error.
func (j *Journal) Backoff(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome, ra readrecovery.RetryAfter, timing *readrecovery.RetryAfterTiming) (string, error) {
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
		BackoffVersion: BackoffVersion,
		Sequence:       len(s.entries) + 1,
		PlanDigest:     s.planDigest(),
		PreviousDigest: s.lastDigest(),
		Method:         req.Method,
		URLDigest:      req.URLDigest,
		RequestID:      redact.ID(out.RequestID),
		Status:         out.StatusCode,
		RetryAfter:     retryAfterJSON{Kind: string(ra.Kind), Value: ra.Value},
		Provenance:     provenance{FileDigest: m.FileDigest, Attempt: req.Attempt, ResendOf: req.ResendOf},
	}
	if timing != nil {
		e.Timing = &timingJSON{timing.ReceivedAtUTC, timing.NotBeforeUTC, timing.ServerDelaySeconds}
	}
	if e.Sequence > MaxEntries {
		j.fail("entry limit")
		return "", fmt.Errorf("%w: entry %d", ErrLimit, e.Sequence)
	}
	if err := validEntry(e); err != nil {
		j.fail("invalid backoff entry: " + err.Error())
		return "", fmt.Errorf("journal: backoff: %w", err)
	}
	data, digest, err := encodeEntry(e)
	if err != nil {
		j.fail(err.Error())
		return "", err
	}
	name := entryName(e.Sequence)
	linked, err := j.writeAtomic(name, data)
	if linked {
		s.entries = append(s.entries, entryRec{name: name, entryFile: entryFile{e, digest}})
		s.cache[name] = entryFile{e, digest}
		s.files++
		if why := untimed(e); why != "" {
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
// is refused: it keeps the marker and returns an error). For an
// upload (a mutation whose context carries [WithUpload]) it first writes
// the immutable receipt-<digest>.json atomically: the ACK (status 2xx,
// request ID, ETag, attempt) or, for any other outcome, the record that the
// upload was attempted without ACK, so that it is never replayed (R40a).
// Then it removes pending-request.json and fsyncs the directory. An error
// means the receipt or the marker removal failed (R39): the marker stays,
// the Journal is unresolved, and the caller keeps the ACK and stops.
func (j *Journal) Complete(ctx context.Context, req readrecovery.JournalRequest, out readrecovery.JournalOutcome) error {
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
	if out.StatusCode == 429 {
		// A 429 completed as if it were anything else would lose its
		// restriction: refuse, keep the marker (unresolved).
		j.fail("a 429 was completed without its backoff entry")
		return errors.New("journal: complete: a 429 must be recorded with Backoff")
	}
	s := j.snap
	if m.FileDigest != "" {
		r := receiptBody{
			PlanDigest:     s.planDigest(),
			FileDigest:     m.FileDigest,
			Method:         req.Method,
			URLDigest:      req.URLDigest,
			Attempt:        req.Attempt,
			ResendOf:       req.ResendOf,
			Status:         out.StatusCode,
			ACK:            out.StatusCode >= 200 && out.StatusCode <= 299,
			RequestID:      redact.ID(out.RequestID),
			ETag:           sanitizeETag(out.ETag),
			TransportError: redact.Text(out.TransportError),
			RecordedAtUTC:  j.clock.Now().Unix(),
		}
		data, digest, err := encodeReceipt(r)
		if err != nil {
			j.fail(err.Error())
			return err
		}
		name := receiptName(m.FileDigest)
		linked, err := j.writeAtomic(name, data)
		if linked {
			rf := receiptFile{r, digest}
			s.receipts[m.FileDigest] = rf
			s.cache[name] = rf
			s.namedPrefixes[name[len(receiptPref):len(receiptPref)+receiptHexLen]] = name
			s.files++
		}
		if err != nil {
			j.fail("write " + name + ": " + redact.Text(err.Error()))
			return fmt.Errorf("journal: receipt: %w", err)
		}
	}
	if err := j.clearMarker(); err != nil {
		j.fail("remove pending-request.json: " + redact.Text(err.Error()))
		return fmt.Errorf("journal: complete: %w", err)
	}
	return nil
}

type uploadKey struct{}

// WithUpload returns a copy of ctx whose request uploads the planned file
// with identity id (its [PlannedFile.ID]). The journal binds the file's
// [FileDigest] as the upload provenance of the request's marker, backoff
// entries and receipt. An empty id returns ctx unchanged.
func WithUpload(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, uploadKey{}, id)
}

// UploadFrom returns the file identity set by [WithUpload].
func UploadFrom(ctx context.Context) (id string, ok bool) {
	id, ok = ctx.Value(uploadKey{}).(string)
	return id, ok
}
