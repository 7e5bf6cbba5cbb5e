package runread

import (
	"fmt"

	"github.com/readrecovery/readrecovery/journal/internal/record"
	"github.com/readrecovery/readrecovery/journal/internal/store"
)

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

// classify is the class of the file with digest d (see [FileState]), its review's decision
// and why; again reports whether it may be sent, under a new approval and while the status
// allows uploads. ignorePending leaves out the pending marker (the caller's own).
func (s *Snapshot) Classify(d string, ignorePending bool) (class FileState, dec record.Decision, why string, again bool) {
	v := s.View(d, ignorePending)
	switch {
	case v.Receipt != nil && v.Receipt.receipt().ACK:
		return FileAcked, "", fmt.Sprintf("%s: ACK %d on record; never sent again", v.Receipt.Name, v.Receipt.receipt().Status), false
	case v.Receipt != nil:
		return FileUnknown, "", fmt.Sprintf("%s: attempted without ACK (status %d); never replayed, needs operator review", v.Receipt.Name, v.Receipt.receipt().Status), false
	case v.Bad != "":
		return FileUnknown, "", fmt.Sprintf("%s: fails verification; never replayed, needs operator review", store.EscapeName(v.Bad)), false
	case v.record != "":
		return FileUnknown, "", v.record + "; never replayed, needs operator review", false
	case v.review != nil && v.review.Review().Decision == record.DecisionSkip:
		return FileReviewed, record.DecisionSkip, v.review.Name + ": reviewed, skip: never sent", false
	case v.review != nil:
		return FileReviewed, v.review.Review().Decision, v.review.Name + ": reviewed, reupload: sent as a never-attempted file", true
	}
	return FileNeverAttempted, "", "never attempted", true
}

// fileView is what a run records about one file in its current round: the
// records since its last review (all records when it has none).
type fileView struct {
	Round   int    // 1 plus the file's reupload reviews
	review  *Rec   // the file's last review, or nil
	Receipt *Rec   // its round's commit receipt not covered by that review
	Bad     string // a receipt or part receipt of the file that fails verification
	record  string // the first record of the round naming the file, as a reason; "" when none
	pending *Rec   // a pending review since the last decision: in flight under a dead marker
}

func (s *Snapshot) View(d string, ignorePending bool) fileView {
	v := fileView{Round: 1, Bad: s.badFiles[record.FileHex(d)]}
	var mark record.ReviewEvidence
	var pending *Rec
	for _, r := range s.byFile[d] {
		switch rv := r.Review(); {
		case rv == nil:
		case rv.Marker != nil:
			pending = r
		default:
			v.review, mark, pending = r, rv.Evidence, nil
			if rv.Decision == record.DecisionReupload {
				v.Round++
			}
		}
	}
	// A skip review keeps the round: the receipt it saw is covered by it.
	if r := s.receiptOf(d, v.Round); r != nil && (v.review == nil || r.Digest != mark.ReceiptDigest) {
		v.Receipt = r
	}
	for _, r := range s.byFile[d] {
		if e := r.Entry(); e != nil && e.Sequence > mark.Entries {
			v.record = fmt.Sprintf("%s: its upload met %d, no ACK on record", r.Name, e.Status)
			return v
		}
	}
	if ps := s.PartsOf(d); len(ps) > mark.Parts {
		p := ps[mark.Parts]
		v.record = fmt.Sprintf("%s: a part of its upload (status %d) but no committed ACK", p.Name, p.part().Status)
		return v
	}
	if v.pending = pending; pending != nil {
		v.record = pending.Name + ": its request was in flight under a dead marker (pending review): outcome unknown"
		return v
	}
	if s.Blocking() && !ignorePending && s.PendingFile == d {
		v.record = record.MarkerName + ": its upload's outcome is unknown"
	}
	return v
}
