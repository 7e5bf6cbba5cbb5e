package journal

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// reviewMethod is the method of a review's marker: not an HTTP request, so
// the marker names no upload in flight.
const reviewMethod = "REVIEW"

// Decision is an operator's decision about an unknown file (docs/policy.md: operator-review).
type Decision = record.Decision

// The two decisions: [DecisionReupload] makes the file eligible again as a never-attempted
// one (sent only under a new approval and while the status allows uploads, as a new round
// with its own records); [DecisionSkip] means the file is never sent by this run.
const (
	DecisionReupload = record.DecisionReupload
	DecisionSkip     = record.DecisionSkip
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
	Decision record.Decision
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

func (r rec) record() ReviewRecord {
	b := r.review()
	if b == nil {
		return ReviewRecord{}
	}
	out := ReviewRecord{Name: r.name, Sequence: b.Sequence, FileDigest: b.FileDigest, Decision: b.Decision,
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
func (j *run) Review(ctx context.Context, file string, decision record.Decision, note string) (ReviewRecord, error) {
	if j.zero() {
		return ReviewRecord{}, errZero
	}
	if decision != record.DecisionReupload && decision != record.DecisionSkip {
		return ReviewRecord{}, fmt.Errorf("%w: decision %q is not reupload or skip", errReviewRefused, record.SanitizeNote(string(decision), 32))
	}
	if file == "" {
		return ReviewRecord{}, fmt.Errorf("%w: no file named", errReviewRefused)
	}
	d := file
	if !record.IsDigest(file) {
		d = record.FileDigest(file)
	}
	check := func() error {
		s := j.snap
		if st := j.statusLocked(j.clock.Now(), true); st.State == Unresolved {
			return &RestrictedError{Status: st}
		}
		if (j.plan != nil && !j.plan[d]) || !s.inPlan(d) {
			return fmt.Errorf("%w: %s is not a file of the run's plan", errReviewRefused, d)
		}
		if fd := s.decide(d, NoNewApproval, Status{}, true); fd.State != FileUnknown {
			return fmt.Errorf("%w: %s is %s, not unknown (%s)", errReviewRefused, d, fd.State, fd.Reason)
		}
		if n := len(s.reviews()); n >= record.MaxReviews {
			return full("%d reviews recorded, the most a run holds", n)
		}
		return nil
	}
	rec, err := j.claimedReview(ctx, d, check, func() record.ReviewBody {
		rb := j.newReview(decision, note)
		rb.FileDigest, rb.Evidence = d, j.snap.evidence(d)
		return rb
	})
	return rec.record(), err
}

// newReview is the run's next review, of decision, with the run's entries as evidence.
func (j *run) newReview(decision record.Decision, note string) record.ReviewBody {
	s := j.snap
	return record.ReviewBody{Sequence: len(s.reviews()) + 1, PlanDigest: s.planDigest(), Decision: decision, Reviewer: osUser(),
		ReviewedAtUTC: j.clock.Now().Unix(), Note: record.SanitizeNote(note, record.MaxNoteBytes), Evidence: s.evidence("")}
}

// claimedReview checks, claims a marker of method REVIEW (naming the file d,
// if any), checks again under it (journal-claim-then-check), writes the
// review build makes and ends the claim. A refusal or a review not written
// removes the marker: nothing is left that blocks (pending-review).
func (j *run) claimedReview(ctx context.Context, d string, check func() error, build func() record.ReviewBody) (rec, error) {
	if err := j.acquire(ctx); err != nil {
		return rec{}, err
	}
	defer func() { <-j.slot }()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshFinishing(ctx)
	if err := j.checkLimits(); err != nil {
		return rec{}, err
	}
	if err := check(); err != nil {
		return rec{}, err
	}
	if err := j.claim(record.MarkerFile{BackoffVersion: record.BackoffVersion, Method: reviewMethod, FileDigest: d, BegunAtUTC: j.clock.Now().Unix()}); err != nil {
		return rec{}, err
	}
	defer func() { j.inflight = nil; j.release() }() // before the unlock: the claim ends with the review
	j.refreshLocked(ctx)
	if err := check(); err != nil {
		return rec{}, j.unclaim(err)
	}
	rb := build()
	r, linked, err := j.putLinked(record.ReviewName(rb.Sequence), record.KindReview, &rb)
	switch {
	case err != nil && !linked:
		return rec{}, j.unclaim(fmt.Errorf("journal: review not written: %w", store.BareErr(err)))
	case err != nil:
		j.fail("write " + r.name + ": " + redact.Text(err.Error()))
		return rec{}, fmt.Errorf("journal: review: %w", err)
	}
	if err := j.clearMarker(); err != nil { // clearMarker records the failure
		return r, fmt.Errorf("journal: review: %w", err)
	}
	return r, nil
}

// evidence is what a review of file d sees now; for d "" (a pending
// review), the run's entries only.
func (s *snapshot) evidence(d string) record.ReviewEvidence {
	var ev record.ReviewEvidence
	if es := s.entries(); len(es) > 0 {
		ev.Entries, ev.LastEventDigest = len(es), es[len(es)-1].Digest
	}
	if d == "" {
		return ev
	}
	if ps := s.partsOf(d); len(ps) > 0 {
		ev.Parts, ev.LastPartDigest = len(ps), ps[len(ps)-1].Digest
	}
	if r := s.receiptOf(d, s.view(d, true).round); r != nil {
		ev.ReceiptDigest = r.Digest
	}
	return ev
}

// reviewProblem checks a review against the records before it: the
// evidence it names exists, and it shows the file unknown (never acked,
// never without a record of its round). "" means the review holds.
func (s *snapshot) reviewProblem(r record.ReviewBody) string {
	ev := r.Evidence
	d := r.FileDigest
	if r.Marker != nil {
		d = r.Marker.FileDigest
	}
	if d != "" && !s.inPlan(d) {
		return "names a file outside plan.json"
	}
	entries, reviews := s.entries(), s.reviews()
	if ev.Entries > len(entries) || ev.Entries > 0 && entries[ev.Entries-1].Digest != ev.LastEventDigest {
		return "evidence names backoff entries that are not on disk (edited)"
	}
	for _, p := range reviews {
		if ev.Entries < p.review().Evidence.Entries {
			return "evidence is older than the review before it (reordered)"
		}
	}
	if r.Marker != nil {
		return "" // a pending review needs no record of the file: the marker was the only one
	}
	if rs := r.Restriction; rs != nil {
		i := slices.IndexFunc(entries, func(e *rec) bool { return e.name == rs.Entry && e.Digest == rs.EventDigest })
		switch {
		case i < 0:
			return "names an entry that is not on disk (" + rs.Entry + ")"
		case record.Untimed(*entries[i].entry()) == "":
			return "bounds " + rs.Entry + ", which has its own timing"
		}
		for _, p := range reviews {
			if prs := p.review().Restriction; prs != nil && prs.EventDigest == rs.EventDigest {
				return "bounds " + rs.Entry + " again (" + p.name + " did)"
			}
		}
		return ""
	}
	if s.light {
		return "" // a decision about a file restricts nothing: not checked by a light scan
	}
	if v := s.view(d, true); v.pending != nil && v.receipt == nil {
		return "" // a pending review made the file unknown
	}
	ps := s.partsOf(d)
	if ev.Parts > len(ps) || ev.Parts > 0 && ps[ev.Parts-1].Digest != ev.LastPartDigest {
		return "evidence names part receipts that are not on disk (edited)"
	}
	round, mark := 1, record.ReviewEvidence{}
	for _, r := range reviews { // each older than ev: checked above
		if p := r.review(); p.FileDigest == d {
			mark = p.Evidence
			if p.Decision == record.DecisionReupload {
				round++
			}
		}
	}
	if ev.Parts < mark.Parts {
		return "evidence is older than the file's review before it (reordered)"
	}
	rc := s.receiptOf(d, round)
	switch {
	case rc != nil && rc.receipt().ACK:
		return "reviews an acked file (a review never applies to an ACK)"
	case rc != nil && rc.Digest != ev.ReceiptDigest:
		return "evidence does not name the receipt of the reviewed round"
	case rc == nil && ev.ReceiptDigest != "":
		return "evidence names a receipt that is not on disk"
	case rc != nil, ev.Parts > mark.Parts:
		return ""
	}
	for _, e := range entries[mark.Entries:ev.Entries] {
		if e.entry().Provenance.FileDigest == d {
			return ""
		}
	}
	return "reviews a file that was not unknown (no record of its round)"
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
	if j.zero() {
		return ReviewRecord{}, errZero
	}
	if marker != "" && marker != record.MarkerName {
		return ReviewRecord{}, fmt.Errorf("%w: %s is not a marker of this run (a run without shards has only %s)", errReviewRefused, store.EscapeName(marker), record.MarkerName)
	}
	if notBefore < 0 || notBefore > unixtime.Max {
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
	gone := !s.pending && s.begun != nil // R85: the marker of an upload begun, removed by hand
	findings := s.findings
	if gone {
		findings = slices.DeleteFunc(slices.Clone(findings), func(f Finding) bool { return f.File == record.MarkerName })
	}
	switch {
	case !s.pending && !gone:
		return ReviewRecord{}, fmt.Errorf("%w: no pending marker: nothing to resolve", errReviewRefused)
	case len(findings) > 0:
		return ReviewRecord{}, &RestrictedError{Status: j.statusLocked(j.clock.Now(), true)}
	case !gone && s.pendingDigest == "":
		return ReviewRecord{}, fmt.Errorf("%w: %s cannot be read, so no review can name it", errReviewRefused, record.MarkerName)
	case !gone && s.pendingResolved == "" && !s.reviewable():
		// R83: a held marker is a request in flight, however old: its own record ends it.
		return ReviewRecord{}, fmt.Errorf("%w: %w: %s is held by its worker (a request in flight): nothing written", errReviewRefused, errLive, record.MarkerName)
	}
	for _, r := range s.reviews() {
		if r.name == s.pendingResolved {
			rec := r.record()
			rec.Removed = j.removeResolved(s) == nil
			return rec, nil
		}
	}
	if n := len(s.reviews()); n >= record.MaxReviews {
		return ReviewRecord{}, full("%d reviews recorded, the most a run holds", n)
	}
	rb := j.newReview(record.DecisionPending, note)
	m, me := record.MarkerFile{}, &record.MarkerEvidence{Digest: s.pendingDigest}
	if gone {
		b := s.begun.req
		m = record.MarkerFile{Method: b.Method, URLDigest: b.URLDigest, FileDigest: b.FileDigest, Part: b.Part, BegunAtUTC: b.BegunAtUTC}
		me.Digest = s.begun.Digest
	} else if data, _, ok := j.b.Read(nil, record.MarkerName, record.MaxRecordBytes); ok && record.DigestOf(data) == s.pendingDigest {
		m, _ = record.ParseMarker(data)
	}
	me.Method, me.FileDigest, me.Part = record.SanitizeNote(m.Method, 16), m.FileDigest, m.Part
	me.BegunAtUTC, me.NotBeforeUTC = max(m.BegunAtUTC, 0), max(rb.ReviewedAtUTC+record.PendingWaitSeconds, notBefore)
	if record.IsDigest(m.URLDigest) {
		me.URLDigest = m.URLDigest
	}
	if me.FileDigest != "" && !s.inPlan(me.FileDigest) {
		me.FileDigest = ""
	}
	if me.BegunAtUTC > unixtime.Max {
		me.BegunAtUTC = 0
	}
	rb.Marker = me
	rec, linked, err := j.putLinked(record.ReviewName(rb.Sequence), record.KindReview, &rb)
	if !linked {
		return ReviewRecord{}, fmt.Errorf("journal: pending review not written: %w", store.BareErr(err))
	}
	out := rec.record()
	if err != nil {
		j.fail("write " + rec.name + ": " + redact.Text(err.Error()))
		return out, fmt.Errorf("journal: pending review: %w", err)
	}
	if gone {
		s.findings, out.Removed = findings, true
		return out, nil
	}
	s.pendingResolved, s.pendingFile = rec.name, ""
	out.Removed = j.removeResolved(s) == nil
	return out, nil
}

// removeResolved removes the marker a pending review resolved (or a dead claim that never
// sent) while it is still the one read: by digest, and on its version (loc.removeDead).
func (j *run) removeResolved(s *snapshot) error {
	if err := j.b.RemoveDead(s.pendingDigest); err != nil {
		return err
	}
	s.pending, s.pendingFile, s.pendingID, s.pendingDigest, s.pendingResolved = false, "", "", "", ""
	s.files--
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
	var target *rec
	check := func() error {
		s := j.snap
		target = s.entryNamed(entry)
		now := j.clock.Now().Unix()
		switch {
		case target == nil:
			return fmt.Errorf("%w: %s is not a backoff entry of the run", errReviewRefused, store.EscapeName(entry))
		case record.Untimed(*target.entry()) == "":
			return fmt.Errorf("%w: %s has its own timing (not_before_utc %d)", errReviewRefused, entry, target.entry().Timing.NotBeforeUTC)
		case s.bounded(entry):
			return fmt.Errorf("%w: %s is bounded by a review already", errReviewRefused, entry)
		case notBefore < now+record.PendingWaitSeconds || notBefore > unixtime.Max:
			return fmt.Errorf("%w: --not-before %d is not at least now + %d s (%d) and representable", errReviewRefused, notBefore, record.PendingWaitSeconds, now+record.PendingWaitSeconds)
		case len(s.reviews()) >= record.MaxReviews:
			return full("%d reviews recorded, the most a run holds", len(s.reviews()))
		}
		for _, f := range s.findings { // but entries without timing
			if e := s.entryNamed(f.File); e == nil || record.Untimed(*e.entry()) == "" {
				return &RestrictedError{Status: j.statusLocked(j.clock.Now(), true)}
			}
		}
		return nil
	}
	rec, err := j.claimedReview(ctx, "", check, func() record.ReviewBody {
		rb := j.newReview(record.DecisionRestriction, note)
		rb.Restriction = &record.RestrictionEvidence{Entry: target.name, EventDigest: target.Digest, NotBeforeUTC: notBefore}
		return rb
	})
	if err == nil { // the entry's finding goes with the review
		j.snap.findings = slices.DeleteFunc(j.snap.findings, func(f Finding) bool { return f.File == target.name })
	}
	return rec.record(), err
}
