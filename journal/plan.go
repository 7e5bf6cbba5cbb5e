package journal

import (
	"fmt"
	"strings"
	"time"
)

// FileState classifies a planned file for an upload-only continuation
// (SPEC R40a).
type FileState string

// The three classes.
const (
	// FileAcked: a receipt records the upload's original 2xx ACK. It is
	// never sent again.
	FileAcked FileState = "acked"
	// FileNeverAttempted: no record names the file. It may be uploaded, but
	// only under a new approval and while the status is clear or elapsed.
	FileNeverAttempted FileState = "never-attempted"
	// FileUnknown: a record names the file (a backoff entry of its upload, a
	// receipt without ACK, the pending marker, or a receipt that fails
	// verification) but no ACK is on record. It is never replayed: retain
	// the source and the receipts and ask for an operator's scoped recovery
	// review.
	FileUnknown FileState = "unknown"
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
	// ID is the planned file's identity, as given.
	ID string
	// Digest is its [FileDigest].
	Digest string
	// State is its class.
	State FileState
	// Upload reports whether this continuation may send it now.
	Upload bool
	// Reason says why, naming the record that decides.
	Reason string
}

// Continuation is the upload-only plan of a run: only uploads, never the
// source creation, and only of files that were never attempted.
type Continuation struct {
	// Status is the run's status at the time of planning.
	Status Status
	// Files are the decisions, in the order of the plan given.
	Files []FileDecision
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

// PlanContinuation re-reads the run and classifies every file of files
// (which must be the run's plan: [ErrPlanMismatch] otherwise, or
// [ErrCorrupt] when the manifest cannot be read) as acked, never-attempted
// or unknown. A never-attempted file gets Upload only with approval ==
// NewApproval and a status at now that allows requests (clear or elapsed):
// fresh approval does not waive a server delay, and an unresolved run
// sends nothing. Acked and unknown files never get Upload.
func (j *Journal) PlanContinuation(files []PlannedFile, approval Approval, now time.Time) (Continuation, error) {
	want, err := PlanDigest(files)
	if err != nil {
		return Continuation{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshLocked()
	s := j.snap
	switch {
	case s.manifest == nil:
		return Continuation{}, fmt.Errorf("%w: run.json cannot be read, so the plan cannot be checked", ErrCorrupt)
	case s.manifest.planDigest != want:
		return Continuation{}, fmt.Errorf("%w: the run records plan %s, not %s", ErrPlanMismatch, s.manifest.planDigest, want)
	}
	c := Continuation{Status: j.statusLocked(now, false)}
	attempted := map[string]string{} // file digest → the record naming it
	for _, e := range s.entries {
		if f := e.Provenance.FileDigest; f != "" && attempted[f] == "" {
			attempted[f] = fmt.Sprintf("%s: its upload met %d, no ACK on record", e.name, e.Status)
		}
	}
	if s.pending {
		if s.pendingFile != "" {
			attempted[s.pendingFile] = markerName + ": its upload's outcome is unknown"
		}
	}
	for _, f := range files {
		d := FileDigest(f.ID)
		fd := FileDecision{ID: f.ID, Digest: d}
		prefix := strings.TrimPrefix(d, digestPrefix)[:receiptHexLen]
		r, hasReceipt := s.receipts[d]
		switch {
		case hasReceipt && r.ACK:
			fd.State, fd.Reason = FileAcked, fmt.Sprintf("%s: ACK %d on record; never sent again", receiptName(d), r.Status)
		case hasReceipt:
			fd.State, fd.Reason = FileUnknown, fmt.Sprintf("%s: attempted without ACK (status %d); never replayed, needs operator review", receiptName(d), r.Status)
		case s.namedPrefixes[prefix] != "":
			fd.State, fd.Reason = FileUnknown, fmt.Sprintf("%s: receipt fails verification; never replayed, needs operator review", s.namedPrefixes[prefix])
		case attempted[d] != "":
			fd.State, fd.Reason = FileUnknown, attempted[d]+"; never replayed, needs operator review"
		default:
			fd.State = FileNeverAttempted
			switch {
			case approval != NewApproval:
				fd.Reason = "never attempted; needs a new approval"
			case !c.Status.Allows():
				fd.Reason = fmt.Sprintf("never attempted; blocked while the run is %s", c.Status.State)
			default:
				fd.Upload, fd.Reason = true, "never attempted; approved and the run is "+string(c.Status.State)
			}
		}
		c.Files = append(c.Files, fd)
	}
	return c, nil
}
