package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// PlannedFile is one file of a batch plan.
type PlannedFile struct {
	// ID is the file's stable identity within the batch (for example its relative path
	// and content hash). It must be non-empty and unique in the plan; it is stored only
	// as its [PlannedFile.Digest]. Do not put secrets in it.
	ID string
}

// digestOfPlan returns the plan's file digests, sorted, and the digest a run
// binds for it, whatever the order of its files (plan-ids); it fails for an
// empty or duplicated ID.
func digestOfPlan(files []PlannedFile) ([]string, string, error) {
	ds := make([]string, 0, len(files))
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if f.ID == "" {
			return nil, "", errors.New("journal: planned file with an empty ID")
		}
		d := record.FileDigest(f.ID)
		if seen[d] {
			return nil, "", fmt.Errorf("journal: planned file %q appears twice", f.ID)
		}
		seen[d] = true
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds, record.PlanDigestOf(ds), nil
}

// FileState classifies a planned file for an upload-only continuation
// (docs/policy.md: upload-only-continuation).
type FileState string

// The classes.
const (
	// FileAcked: a receipt records the upload's original 2xx ACK; it is
	// never sent again.
	FileAcked FileState = "acked"
	// FileNeverAttempted: no record names the file. It may be uploaded only
	// under a new approval and while the status is clear or elapsed.
	FileNeverAttempted FileState = "never-attempted"
	// FileUnknown: a record names the file (a backoff entry of its upload, a
	// part receipt, a receipt without ACK or failing verification, the
	// pending marker) but no ACK is on record. It is never replayed: keep
	// the source and the receipts for an operator's review ([Journal.Review]),
	// the only way out of unknown.
	FileUnknown FileState = "unknown"
	// FileReviewed: an operator reviewed the file while it was unknown and
	// no record of it came since. With [DecisionReupload] it is sent again
	// as a never-attempted file is (a new approval still needed); with
	// [DecisionSkip], never. A review never makes a file acked.
	FileReviewed FileState = "reviewed"
	// FileInFlight: another worker's pending marker names the file (its
	// request is in flight); never eligible while the marker stays. Only a
	// Journal opened [WithPendingWait] reports it: without, the marker makes
	// the run unresolved and the file unknown.
	FileInFlight FileState = "in-flight"
)

// Approval says whether an operator approved this continuation afresh. An
// earlier run's approval never carries over.
type Approval bool

// The two approvals.
const (
	NoNewApproval Approval = false
	NewApproval   Approval = true
)

// Digest returns the file's identity digest: "sha256:" and the hex SHA-256
// of its ID. The journal stores only this digest, never the ID itself.
func (f PlannedFile) Digest() string { return record.FileDigest(f.ID) }

// FileDecision is the plan for one file.
type FileDecision struct {
	ID       string          // the planned file's identity, as given
	Digest   string          // its [PlannedFile.Digest]
	State    FileState       // its class
	Decision record.Decision // the decision of a reviewed file's review, else ""
	Upload   bool            // whether this continuation may send it now
	Reason   string          // why, naming the record that decides
}

// Continuation is the upload-only plan of a run: only uploads, never the
// source creation, and only of files that were never attempted.
type Continuation struct {
	Status Status // the run's status at the time of planning
	// Partial is set by [Journal.RecordedPlan] for a run without plan.json
	// (written before it existed): Files then lists only the files that
	// records name, and never-attempted files are missing.
	Partial bool
	Files   []FileDecision // the decisions, in the order of the plan given
}

// Uploads returns the IDs of the files that may be sent now, in plan order.
func (c Continuation) Uploads() []string {
	var ids []string
	for _, f := range c.Files {
		if f.Upload {
			ids = append(ids, f.ID)
		}
	}
	return ids
}

// Count returns how many files are in state st.
func (c Continuation) Count(st FileState) int {
	n := 0
	for _, f := range c.Files {
		if f.State == st {
			n++
		}
	}
	return n
}

// continuation is [Journal.PlanContinuation] of files, or with files nil
// [Journal.RecordedPlan], of a run without shards.
func (j *run) continuation(files []PlannedFile, approval Approval, now time.Time) (Continuation, error) {
	if j.zero() {
		return Continuation{}, errZero
	}
	_, want, err := digestOfPlan(files) // nil: the empty plan, never an error
	if err != nil {
		return Continuation{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshLocked(context.Background()) // neither takes a context: the store's own bound
	s := j.snap
	switch {
	case s.manifest == nil && files == nil:
		return Continuation{}, fmt.Errorf("%w: run.json cannot be read, so the plan is unknown", errCorrupt)
	case s.manifest == nil:
		return Continuation{}, fmt.Errorf("%w: run.json cannot be read, so the plan cannot be checked", errCorrupt)
	case files != nil && s.manifest.PlanDigest != want:
		return Continuation{}, fmt.Errorf("%w: the run records plan %s, not %s", ErrPlanMismatch, s.manifest.PlanDigest, want)
	}
	c := Continuation{Status: j.statusLocked(now, false)}
	if files == nil {
		return s.recorded(c), nil
	}
	// WithPendingWait: a marker is a request in flight (docs/policy.md: journal-claim-then-check).
	shared := j.pendingWait > 0 && j.failed == ""
	if shared {
		c.Status = s.status(now, true)
	}
	other := shared && j.inflight == nil && s.blocking() // another worker's marker
	if other {
		c.Status.Reason += "; " + record.MarkerName + ": another worker's request is in flight"
	}
	for _, f := range files {
		fd := s.decide(record.FileDigest(f.ID), approval, c.Status, shared)
		if other && s.pendingFile == fd.Digest && fd.State != FileAcked {
			fd.State, fd.Decision, fd.Upload = FileInFlight, "", false
			fd.Reason = record.MarkerName + ": another worker's request of this file is in flight; never eligible while it is"
		}
		fd.ID = f.ID
		c.Files = append(c.Files, fd)
	}
	return c, nil
}

// decide classifies the file with digest d (see [FileState]).
// ignorePending leaves out the pending marker (the caller's own).
func (s *snapshot) decide(d string, approval Approval, st Status, ignorePending bool) FileDecision {
	fd := FileDecision{Digest: d}
	v := s.view(d, ignorePending)
	switch {
	case v.receipt != nil && v.receipt.receipt().ACK:
		fd.State, fd.Reason = FileAcked, fmt.Sprintf("%s: ACK %d on record; never sent again", v.receipt.name, v.receipt.receipt().Status)
	case v.receipt != nil:
		fd.State, fd.Reason = FileUnknown, fmt.Sprintf("%s: attempted without ACK (status %d); never replayed, needs operator review", v.receipt.name, v.receipt.receipt().Status)
	case v.bad != "":
		fd.State, fd.Reason = FileUnknown, fmt.Sprintf("%s: fails verification; never replayed, needs operator review", store.EscapeName(v.bad))
	case v.record != "":
		fd.State, fd.Reason = FileUnknown, v.record+"; never replayed, needs operator review"
	case v.review != nil && v.review.review().Decision == record.DecisionSkip:
		fd.State, fd.Decision, fd.Reason = FileReviewed, record.DecisionSkip, v.review.name+": reviewed, skip: never sent"
	case v.review != nil:
		fd.State, fd.Decision = FileReviewed, v.review.review().Decision
		fd.Upload, fd.Reason = eligible(approval, st, v.review.name+": reviewed, reupload: sent as a never-attempted file")
	default:
		fd.State = FileNeverAttempted
		fd.Upload, fd.Reason = eligible(approval, st, "never attempted")
	}
	return fd
}

// eligible decides a file that may be sent under a new approval.
func eligible(approval Approval, st Status, what string) (bool, string) {
	switch {
	case approval != NewApproval:
		return false, what + "; needs a new approval"
	case !st.Allows():
		return false, fmt.Sprintf("%s; blocked while the run is %s", what, st.State)
	}
	return true, what + "; approved and the run is " + string(st.State)
}

// fileView is what a run records about one file in its current round: the
// records since its last review (all records when it has none).
type fileView struct {
	round   int    // 1 plus the file's reupload reviews
	review  *rec   // the file's last review, or nil
	receipt *rec   // its round's commit receipt not covered by that review
	bad     string // a receipt or part receipt of the file that fails verification
	record  string // the first record of the round naming the file, as a reason; "" when none
	pending *rec   // a pending review since the last decision: in flight under a dead marker
}

func (s *snapshot) view(d string, ignorePending bool) fileView {
	v := fileView{round: 1, bad: s.badFiles[record.FileHex(d)]}
	var mark record.ReviewEvidence
	var pending *rec
	for _, r := range s.byFile[d] {
		switch rv := r.review(); {
		case rv == nil:
		case rv.Marker != nil:
			pending = r
		default:
			v.review, mark, pending = r, rv.Evidence, nil
			if rv.Decision == record.DecisionReupload {
				v.round++
			}
		}
	}
	// A skip review keeps the round: the receipt it saw is covered by it.
	if r := s.receiptOf(d, v.round); r != nil && (v.review == nil || r.Digest != mark.ReceiptDigest) {
		v.receipt = r
	}
	for _, r := range s.byFile[d] {
		if e := r.entry(); e != nil && e.Sequence > mark.Entries {
			v.record = fmt.Sprintf("%s: its upload met %d, no ACK on record", r.name, e.Status)
			return v
		}
	}
	if ps := s.partsOf(d); len(ps) > mark.Parts {
		p := ps[mark.Parts]
		v.record = fmt.Sprintf("%s: a part of its upload (status %d) but no committed ACK", p.name, p.part().Status)
		return v
	}
	if v.pending = pending; pending != nil {
		v.record = pending.name + ": its request was in flight under a dead marker (pending review): outcome unknown"
		return v
	}
	if s.blocking() && !ignorePending && s.pendingFile == d {
		v.record = record.MarkerName + ": its upload's outcome is unknown"
	}
	return v
}

// recorded is c with every file of plan.json decided as [Journal.RecordedPlan]
// decides them; without plan.json, the files records name (Partial).
func (s *snapshot) recorded(c Continuation) Continuation {
	files := s.planFiles
	if files == nil {
		c.Partial = true
		for _, r := range s.recs {
			if d, pending := namedFile(r); !pending {
				files = append(files, d)
			}
		}
		files = append(files, s.pendingFile)
		slices.Sort(files)
		files = slices.DeleteFunc(slices.Compact(files), func(d string) bool { return d == "" })
	}
	for _, d := range files {
		c.Files = append(c.Files, s.decide(d, NoNewApproval, c.Status, false))
	}
	return c
}
