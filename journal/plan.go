package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// PlannedFile is one file of a batch plan.
type PlannedFile struct {
	// ID is the file's stable identity within the batch (for example its relative path
	// and content hash). It must be non-empty and unique in the plan; it is stored only
	// as its [PlannedFile.Digest]. Do not put secrets in it.
	ID string
}

// Digest returns the file's identity digest: "sha256:" and the hex SHA-256
// of its ID. The journal stores only this digest, never the ID itself.
func (f PlannedFile) Digest() string { return record.FileDigest(f.ID) }

// fileRef is the digest of a file named by its ID or by its digest.
func fileRef(file string) string {
	if record.IsDigest(file) {
		return file
	}
	return record.FileDigest(file)
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

// Decision is an operator's decision about an unknown file (docs/policy.md: operator-review).
type Decision = record.Decision

// The two decisions.
const (
	// DecisionReupload makes the file eligible again as a never-attempted
	// one: it is sent only under a new approval and while the status
	// allows uploads. Its next upload is a new round with its own records.
	DecisionReupload = record.DecisionReupload
	// DecisionSkip means the file is never sent by this run.
	DecisionSkip = record.DecisionSkip
)

// Approval says whether an operator approved this continuation afresh. An
// earlier run's approval never carries over.
type Approval bool

// The two approvals.
const (
	NoNewApproval Approval = false
	NewApproval   Approval = true
)

// FileDecision is the plan for one file.
type FileDecision struct {
	ID       string    // the planned file's identity, as given
	Digest   string    // its [PlannedFile.Digest]
	State    FileState // its class
	Decision Decision  // the decision of a reviewed file's review, else ""
	Upload   bool      // whether this continuation may send it now
	Reason   string    // why, naming the record that decides
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
	case s.Manifest == nil && files == nil:
		return Continuation{}, fmt.Errorf("%w: run.json cannot be read, so the plan is unknown", runread.ErrCorrupt)
	case s.Manifest == nil:
		return Continuation{}, fmt.Errorf("%w: run.json cannot be read, so the plan cannot be checked", runread.ErrCorrupt)
	case files != nil && s.Manifest.PlanDigest != want:
		return Continuation{}, fmt.Errorf("%w: the run records plan %s, not %s", ErrPlanMismatch, s.Manifest.PlanDigest, want)
	}
	c := Continuation{Status: j.statusLocked(now, false)}
	if files == nil {
		c.Files, c.Partial = recorded(s, c.Status)
		return c, nil
	}
	// WithPendingWait: a marker is a request in flight (docs/policy.md: journal-claim-then-check).
	shared := j.pendingWait > 0 && j.failed == ""
	if shared {
		c.Status = statusOf(s, now, true)
	}
	other := shared && j.inflight == nil && s.Blocking() // another worker's marker
	if other {
		c.Status.Reason += "; " + record.MarkerName + ": another worker's request is in flight"
	}
	for _, f := range files {
		fd := decide(s, record.FileDigest(f.ID), approval, c.Status, shared)
		if other {
			underMarker(&fd, s, record.MarkerName, false)
		}
		fd.ID = f.ID
		c.Files = append(c.Files, fd)
	}
	return c, nil
}

// decide classifies the file with digest d (see [FileState]) for a continuation under
// approval at status st. ignorePending leaves out the pending marker (the caller's own).
func decide(s *runread.Snapshot, d string, approval Approval, st Status, ignorePending bool) FileDecision {
	fd := FileDecision{Digest: d}
	var again bool
	if fd.State, fd.Decision, fd.Reason, again = s.Classify(d, ignorePending); again {
		fd.Upload, fd.Reason = eligible(approval, st, fd.Reason)
	}
	return fd
}

// underMarker decides fd's file anew when s's blocking marker (ref names it), another
// worker's, names it and no ACK is on record: in-flight, or unknown when the marker is dead.
func underMarker(fd *FileDecision, s *runread.Snapshot, ref string, dead bool) {
	if !s.Blocking() || s.PendingFile != fd.Digest || fd.State == FileAcked {
		return
	}
	fd.State, fd.Decision, fd.Upload = FileInFlight, "", false
	fd.Reason = ref + ": another worker's request of this file is in flight; never eligible while it is"
	if dead {
		fd.State, fd.Reason = FileUnknown, ref+": dead marker: its upload's outcome is unknown"
	}
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

// recorded decides, at st, every file of plan.json as [Journal.RecordedPlan] decides them;
// without plan.json, the files records name (partial).
func recorded(s *runread.Snapshot, st Status) (out []FileDecision, partial bool) {
	files := s.PlanFiles
	if files == nil {
		partial = true
		for _, r := range s.Recs {
			if d, pending := runread.NamedFile(r); !pending {
				files = append(files, d)
			}
		}
		files = append(files, s.PendingFile)
		slices.Sort(files)
		files = slices.DeleteFunc(slices.Compact(files), func(d string) bool { return d == "" })
	}
	for _, d := range files {
		out = append(out, decide(s, d, NoNewApproval, st, false))
	}
	return out, partial
}
