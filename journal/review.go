package journal

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// ReviewRecord is one review entry of a run, as [Journal.Review] wrote it.
type ReviewRecord struct {
	// Name is the entry's file name, review-NNNN.json; Sequence is NNNN.
	Name     string
	Sequence int
	// FileDigest is the reviewed file's [PlannedFile.Digest].
	FileDigest string
	// Decision is reupload or skip; "pending" for a pending review,
	// "restriction" for a restriction review.
	Decision Decision
	// Reviewer is the sanitized name of the OS user who wrote the review,
	// ReviewedAtUTC its time in UTC Unix seconds, Note the sanitized note.
	Reviewer      string
	ReviewedAtUTC int64
	Note          string
	// Digest is the entry's review_digest.
	Digest string
	// The fields of a pending review ([Journal.ReviewPending]): Marker names
	// the resolved marker (pending-request.json, or in a parallel run
	// shard-KK/pending-request.json); MarkerDigest is the digest of its
	// bytes; MarkerFileDigest is the file it named, unknown now ("" for a
	// request of no planned file, or an unreadable marker).
	Marker, MarkerDigest, MarkerFileDigest string
	// NotBeforeUTC is when the run's wait for the lost response ends.
	NotBeforeUTC int64
	// Removed reports whether the marker is gone; when false (its removal failed,
	// or it had changed), the review still resolves it and a second ReviewPending removes it.
	Removed bool
}

func reviewRecord(r runread.Rec) ReviewRecord {
	b := r.Review()
	if b == nil {
		return ReviewRecord{}
	}
	out := ReviewRecord{Name: r.Name, Sequence: b.Sequence, FileDigest: b.FileDigest, Decision: b.Decision,
		Reviewer: b.Reviewer, ReviewedAtUTC: b.ReviewedAtUTC, Note: b.Note, Digest: r.Digest}
	if m := b.Marker; m != nil {
		out.Marker, out.MarkerDigest, out.MarkerFileDigest, out.NotBeforeUTC = record.MarkerName, m.Digest, m.FileDigest, m.NotBeforeUTC
	}
	return out
}

// Review is [Journal.Review] of a run without shards (operator-review), checked
// under its claim as [Journal.Begin] is. Errors: a refusal (a decision neither
// reupload nor skip, a file outside the plan or not unknown); a *RestrictedError
// (a finding, another request's marker); the context's error while waiting for
// this Journal's request in flight; else a persistence failure (unresolved).
func (j *run) Review(ctx context.Context, file string, decision Decision, note string) (ReviewRecord, error) {
	switch {
	case j.zero():
		return ReviewRecord{}, errZero
	case decision != DecisionReupload && decision != DecisionSkip:
		return ReviewRecord{}, fmt.Errorf("%w: decision %q is not reupload or skip", errReviewRefused, record.SanitizeNote(string(decision), 32))
	case file == "":
		return ReviewRecord{}, fmt.Errorf("%w: no file named", errReviewRefused)
	}
	d := fileRef(file)
	check := func() error {
		s := j.snap
		if st := j.statusLocked(j.clock.Now(), j.inflight != nil); st.State == Unresolved {
			return &RestrictedError{Status: st}
		}
		if (j.plan != nil && !j.plan[d]) || !s.InPlan(d) {
			return fmt.Errorf("%w: %s is not a file of the run's plan", errReviewRefused, d)
		}
		if fd := decide(s, d, NoNewApproval, Status{}, true); fd.State != FileUnknown {
			return fmt.Errorf("%w: %s is %s, not unknown (%s)", errReviewRefused, d, fd.State, fd.Reason)
		}
		return nil
	}
	rec, err := j.claimedReview(ctx, d, check, func() record.ReviewBody {
		rb := j.newReview(decision, note)
		rb.FileDigest, rb.Evidence = d, j.snap.Evidence(d)
		return rb
	})
	return reviewRecord(rec), err
}

// newReview is the run's next review, of decision, with the run's entries as evidence.
func (j *run) newReview(decision Decision, note string) record.ReviewBody {
	s := j.snap
	return record.ReviewBody{Sequence: len(s.Reviews()) + 1, PlanDigest: s.PlanDigest(), Decision: decision, Reviewer: osUser(),
		ReviewedAtUTC: j.clock.Now().Unix(), Note: record.SanitizeNote(note, record.MaxNoteBytes), Evidence: s.Evidence("")}
}

// claimedReview checks, claims a marker of method REVIEW (naming the file d,
// if any), checks again under it (journal-claim-then-check), writes the
// review build makes and ends the claim. A refusal or a review not written
// removes the marker: nothing is left that blocks (pending-review).
func (j *run) claimedReview(ctx context.Context, d string, check func() error, build func() record.ReviewBody) (runread.Rec, error) {
	if err := j.acquire(ctx); err != nil {
		return runread.Rec{}, err
	}
	defer func() { <-j.slot }()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshFinishing(ctx)
	if err := cmp.Or(j.checkLimits(), check()); err != nil {
		return runread.Rec{}, err
	}
	if err := j.claim(record.MarkerFile{BackoffVersion: record.BackoffVersion, Method: record.ReviewMethod, FileDigest: d, BegunAtUTC: j.clock.Now().Unix()}); err != nil {
		return runread.Rec{}, err
	}
	defer func() { j.inflight = nil; j.release() }() // before the unlock: the claim ends with the review
	j.refreshLocked(ctx)
	if err := check(); err != nil {
		return runread.Rec{}, j.unclaim(err)
	}
	rb := build()
	r, linked, err := j.putLinked(record.ReviewName(rb.Sequence), record.KindReview, &rb)
	switch {
	case err != nil && !linked:
		return runread.Rec{}, j.unclaim(fmt.Errorf("journal: review not written: %w", store.BareErr(err)))
	case err != nil:
		j.fail("write " + r.Name + ": " + redact.Text(err.Error()))
		return runread.Rec{}, fmt.Errorf("journal: review: %w", err)
	}
	if err := j.clearMarker(); err != nil { // clearMarker records the failure
		return r, fmt.Errorf("journal: review: %w", err)
	}
	return r, nil
}

// osUser names the OS user for a review, sanitized: the account name, else
// $USER, else the numeric user ID.
func osUser() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name = record.SanitizeNote(name, record.MaxReviewerBytes); name == "" {
		name = "uid-" + strconv.Itoa(os.Getuid())
	}
	return name
}

// ReviewPendingMarker is [Journal.ReviewPendingMarker] of a run without shards (pending-review,
// marker-liveness): of a dead marker, or of an upload's marker removed by hand (R85:
// bound to its begun head's digest); where the store cannot tell liveness, the
// operator's word that no worker sends it. Errors: a refusal (no marker, notBefore
// not representable, a live marker); a *RestrictedError for another finding; a
// persistence failure when the review cannot be written (the run is as it was).
// A marker the run already resolved is only removed again. marker is "" or
// its only marker's name (as [Journal.ReviewPendingMarker] names it).
func (j *run) ReviewPendingMarker(ctx context.Context, marker, note string, notBefore int64) (ReviewRecord, error) {
	switch {
	case j.zero():
		return ReviewRecord{}, errZero
	case marker != "" && marker != record.MarkerName:
		return ReviewRecord{}, fmt.Errorf("%w: %s is not a marker of this run (a run without shards has only %s)", errReviewRefused, store.EscapeName(marker), record.MarkerName)
	case notBefore < 0 || notBefore > unixtime.Max:
		return ReviewRecord{}, fmt.Errorf("%w: --not-before %d is not a representable Unix time", errReviewRefused, notBefore)
	}
	if err := j.acquire(ctx); err != nil {
		return ReviewRecord{}, err
	}
	defer func() { <-j.slot }()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshFinishing(ctx)
	s := j.snap
	gone := !s.Pending && s.Begun != nil // R85: the marker of an upload begun, removed by hand
	findings := s.Findings
	if gone {
		findings = slices.DeleteFunc(slices.Clone(findings), func(f Finding) bool { return f.File == record.MarkerName })
	}
	switch {
	case !s.Pending && !gone:
		return ReviewRecord{}, fmt.Errorf("%w: no pending marker: nothing to resolve", errReviewRefused)
	case len(findings) > 0:
		return ReviewRecord{}, &RestrictedError{Status: j.statusLocked(j.clock.Now(), j.inflight != nil)}
	case !gone && s.PendingDigest == "":
		return ReviewRecord{}, fmt.Errorf("%w: %s cannot be read, so no review can name it", errReviewRefused, record.MarkerName)
	case !gone && s.PendingResolved == "" && !s.Reviewable():
		// R83: a held marker is a request in flight, however old: its own record ends it.
		return ReviewRecord{}, fmt.Errorf("%w: %w: %s is held by its worker (a request in flight): nothing written", errReviewRefused, errLive, record.MarkerName)
	}
	if i := slices.IndexFunc(s.Recs, func(r *runread.Rec) bool { return r.Name == s.PendingResolved }); i >= 0 {
		rec := reviewRecord(*s.Recs[i]) // its pending review: the marker is only removed again
		rec.Removed = j.removeResolved(s) == nil
		return rec, nil
	}
	rb := j.newReview(record.DecisionPending, note)
	m, digest := record.MarkerFile{}, s.PendingDigest
	if gone {
		b := s.Begun.Req
		m = record.MarkerFile{Method: b.Method, URLDigest: b.URLDigest, FileDigest: b.FileDigest, Part: b.Part, BegunAtUTC: b.BegunAtUTC}
		digest = s.Begun.Digest
	} else if data, _, ok := j.b.Read(nil, record.MarkerName, record.MaxRecordBytes); ok && record.DigestOf(data) == s.PendingDigest {
		m, _ = record.ParseMarker(data)
	}
	// What the evidence may hold of it: a sha256 URL digest, a planned file, a Unix time.
	if !record.IsDigest(m.URLDigest) {
		m.URLDigest = ""
	}
	if !s.InPlan(m.FileDigest) {
		m.FileDigest = ""
	}
	if m.BegunAtUTC < 0 || m.BegunAtUTC > unixtime.Max {
		m.BegunAtUTC = 0
	}
	rb.Marker = &record.MarkerEvidence{Digest: digest, Method: record.SanitizeNote(m.Method, 16), URLDigest: m.URLDigest, FileDigest: m.FileDigest,
		Part: m.Part, BegunAtUTC: m.BegunAtUTC, NotBeforeUTC: max(rb.ReviewedAtUTC+record.PendingWaitSeconds, notBefore)}
	rec, linked, err := j.putLinked(record.ReviewName(rb.Sequence), record.KindReview, &rb)
	if !linked {
		return ReviewRecord{}, fmt.Errorf("journal: pending review not written: %w", store.BareErr(err))
	}
	out := reviewRecord(rec)
	if err != nil {
		j.fail("write " + rec.Name + ": " + redact.Text(err.Error()))
		return out, fmt.Errorf("journal: pending review: %w", err)
	}
	if gone {
		s.Findings, out.Removed = findings, true
		return out, nil
	}
	s.PendingResolved, s.PendingFile = rec.Name, ""
	out.Removed = j.removeResolved(s) == nil
	return out, nil
}

// removeResolved removes the marker a pending review resolved (or a dead claim that never
// sent) while it is still the one read: by digest, and on its version (loc.removeDead).
func (j *run) removeResolved(s *runread.Snapshot) error {
	if err := j.b.RemoveDead(s.PendingDigest); err != nil {
		return err
	}
	s.Pending, s.PendingFile, s.PendingID, s.PendingDigest, s.PendingResolved = false, "", "", "", ""
	s.Files--
	return nil
}

// ReviewRestriction is [Journal.ReviewRestriction] of a run without shards
// (restriction-review); the entry's file stays unknown. Errors: a refusal (an entry
// not on record, with its own timing or bounded already, a notBefore too early or
// not representable); a *RestrictedError (any finding but entries without timing,
// another request's marker); the context's error while waiting; else a persistence failure.
func (j *run) ReviewRestriction(ctx context.Context, entry, note string, notBefore int64) (ReviewRecord, error) {
	if j.zero() {
		return ReviewRecord{}, errZero
	}
	var target *runread.Rec
	check := func() error {
		s := j.snap
		target = s.EntryNamed(entry)
		now := j.clock.Now().Unix()
		switch {
		case target == nil:
			return fmt.Errorf("%w: %s is not a backoff entry of the run", errReviewRefused, store.EscapeName(entry))
		case record.Untimed(*target.Entry()) == "":
			return fmt.Errorf("%w: %s has its own timing (not_before_utc %d)", errReviewRefused, entry, target.Entry().Timing.NotBeforeUTC)
		case s.Bounded(entry):
			return fmt.Errorf("%w: %s is bounded by a review already", errReviewRefused, entry)
		case notBefore < now+record.PendingWaitSeconds || notBefore > unixtime.Max:
			return fmt.Errorf("%w: --not-before %d is not at least now + %d s (%d) and representable", errReviewRefused, notBefore, record.PendingWaitSeconds, now+record.PendingWaitSeconds)
		}
		for _, f := range s.Findings { // but entries without timing
			if e := s.EntryNamed(f.File); e == nil || record.Untimed(*e.Entry()) == "" {
				return &RestrictedError{Status: j.statusLocked(j.clock.Now(), j.inflight != nil)}
			}
		}
		return nil
	}
	rec, err := j.claimedReview(ctx, "", check, func() record.ReviewBody {
		rb := j.newReview(record.DecisionRestriction, note)
		rb.Restriction = &record.RestrictionEvidence{Entry: target.Name, EventDigest: target.Digest, NotBeforeUTC: notBefore}
		return rb
	})
	if err == nil { // the entry's finding goes with the review
		j.snap.Findings = slices.DeleteFunc(j.snap.Findings, func(f Finding) bool { return f.File == target.Name })
	}
	return reviewRecord(rec), err
}
