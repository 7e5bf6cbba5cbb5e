package journal

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// State is the backoff state of a run (docs/policy.md: status-before-network).
type State string

// The four states.
const (
	// Clear: the run holds no backoff entry. Network access is allowed.
	Clear State = "clear"
	// Waiting: the latest server restriction lasts until NotBeforeUTC.
	// Network access is blocked until then; fresh approval does not waive it.
	Waiting State = "waiting"
	// Elapsed: every recorded restriction has passed. Only otherwise
	// eligible uploads may proceed (see [Journal.PlanContinuation]).
	Elapsed State = "elapsed"
	// Unresolved: the journal cannot bound the restriction in time, or
	// cannot be trusted. Network access is blocked; no file timestamp,
	// approval or edit repairs it. The ways out keep every record: for a
	// dead pending marker [Journal.ReviewPending], for an entry without
	// timing [Journal.ReviewRestriction], for a clock before a recorded
	// receipt time the clock's correction. A run that fails verification
	// (an edited, deleted or foreign file) has no review: the batch goes on
	// in a new run after an operator's check.
	Unresolved State = "unresolved"
)

// FileState classifies a planned file for an upload-only continuation
// (docs/policy.md: upload-only-continuation); the classes are documented at their definition.
type FileState = runread.FileState

// The classes.
const (
	// FileAcked: a receipt records the upload's original 2xx ACK; it is
	// never sent again.
	FileAcked = runread.FileAcked
	// FileNeverAttempted: no record names the file. It may be uploaded only
	// under a new approval and while the status is clear or elapsed.
	FileNeverAttempted = runread.FileNeverAttempted
	// FileUnknown: a record names the file (a backoff entry of its upload, a
	// part receipt, a receipt without ACK or failing verification, the
	// pending marker) but no ACK is on record. It is never replayed: keep
	// the source and the receipts for an operator's review ([Journal.Review]),
	// the only way out of unknown.
	FileUnknown = runread.FileUnknown
	// FileReviewed: an operator reviewed the file while it was unknown and
	// no record of it came since. With [DecisionReupload] it is sent again
	// as a never-attempted file is (a new approval still needed); with
	// [DecisionSkip], never. A review never makes a file acked.
	FileReviewed = runread.FileReviewed
	// FileInFlight: another worker's pending marker names the file (its
	// request is in flight); never eligible while the marker stays. Only a
	// Journal opened [WithPendingWait] reports it: without, the marker makes
	// the run unresolved and the file unknown.
	FileInFlight = runread.FileInFlight
)

// Status is a run's backoff state at one moment. Its JSON form is the
// file_batch.backoff object of the command:
//
//	{"state":"waiting","received_at_utc":1700000000,"not_before_utc":1700000060,
//	 "server_delay_seconds":60,"remaining_seconds":42,"reason":"..."}
//
// The three timing fields are those of the latest restriction (the entry
// with the greatest not_before_utc) and are null in JSON (0 in Go) when no
// timing is known. remaining_seconds is null for unresolved, 0 for clear
// and elapsed.
type Status struct {
	State State // clear, waiting, elapsed or unresolved
	// ReceivedAtUTC is the receipt time of the latest restriction's 429, in
	// UTC Unix seconds; 0 when none is known.
	ReceivedAtUTC int64
	// NotBeforeUTC is the first Unix second at which the latest restriction
	// has passed; 0 when none is known.
	NotBeforeUTC       int64
	ServerDelaySeconds int64 // the delay the server asked for
	// RemainingSeconds is, for waiting, the whole seconds (rounded up) until
	// NotBeforeUTC; 0 otherwise.
	RemainingSeconds int64
	Reason           string // why, naming the file that decides

	// Files is the run at a glance: its planned files per class (a file under an
	// abandoned marker is unknown), as [Journal.Status] saw them; nil in every
	// other Status, and for a run without plan.json.
	Files map[FileState]int
	// Shards has a [ShardView] per shard (one for a run without shards); nil
	// in every Status but [Journal.Status]'s.
	Shards []ShardView

	cause     error // errCorrupt or runread.ErrPending for unresolved, or nil
	abandoned bool  // the cause is a marker whose worker the store shows dead (R83): no use waiting
	named     bool  // Reason names its shard already (a parallel run's merge)
	reviewed  bool  // waiting for a pending review's not-before (the latest restriction)
}

// Allows reports whether the state lets requests proceed: clear or elapsed.
func (s Status) Allows() bool { return s.State == Clear || s.State == Elapsed }

// nextWaits reports whether [Journal.Next] waits s out rather than return it
// (docs/policy.md: dead-upload-waits): a dead worker's upload that only the
// pending review ends, then that review's wait.
func (s Status) nextWaits() bool {
	return s.State == Unresolved && s.abandoned || s.State == Waiting && s.reviewed
}

type statusJSON struct {
	State              State  `json:"state"`
	ReceivedAtUTC      *int64 `json:"received_at_utc"`
	NotBeforeUTC       *int64 `json:"not_before_utc"`
	ServerDelaySeconds *int64 `json:"server_delay_seconds"`
	RemainingSeconds   *int64 `json:"remaining_seconds"`
	Reason             string `json:"reason"`
}

// MarshalJSON encodes s with the field names of docs/policy.md: status-before-network, in that order.
func (s Status) MarshalJSON() ([]byte, error) {
	j := statusJSON{State: s.State, Reason: s.Reason}
	if s.ReceivedAtUTC != 0 {
		j.ReceivedAtUTC, j.NotBeforeUTC, j.ServerDelaySeconds = &s.ReceivedAtUTC, &s.NotBeforeUTC, &s.ServerDelaySeconds
	}
	if s.State != Unresolved {
		j.RemainingSeconds = &s.RemainingSeconds
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the form MarshalJSON writes; null is 0.
func (s *Status) UnmarshalJSON(b []byte) error {
	var j statusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	*s = Status{State: j.State, ReceivedAtUTC: val(j.ReceivedAtUTC), NotBeforeUTC: val(j.NotBeforeUTC),
		ServerDelaySeconds: val(j.ServerDelaySeconds), RemainingSeconds: val(j.RemainingSeconds), Reason: j.Reason}
	return nil
}

// CommandJSON encodes s as the command prints it:
// {"file_batch":{"backoff":{...}}}, followed, for the status of
// [Journal.Status], by the run at a glance: "files" (the counts per class)
// and "shards" (one object per shard, see [ShardView]).
func (s Status) CommandJSON() ([]byte, error) {
	type fileBatch struct {
		Backoff Status            `json:"backoff"`
		Files   map[FileState]int `json:"files,omitempty"`
		Shards  []ShardView       `json:"shards,omitempty"`
	}
	return json.Marshal(struct {
		FileBatch fileBatch `json:"file_batch"`
	}{fileBatch{s, s.Files, s.Shards}})
}

// status is snapshot s's state at now, in the switch's order (docs/policy.md:
// status-before-network, not-before-survives); ignorePending leaves the marker out.
func statusOf(s *runread.Snapshot, now time.Time, ignorePending bool) Status {
	var st Status
	var latest *restriction // the greatest not_before_utc (the last of equals)
	var newest restriction  // the greatest received_at_utc (the first of equals)
	for _, r := range restrictions(s) {
		if latest == nil || r.NotBeforeUTC >= latest.NotBeforeUTC {
			latest = &r
		}
		if r.ReceivedAtUTC > newest.ReceivedAtUTC {
			newest = r
		}
	}
	if latest != nil {
		st.ReceivedAtUTC = latest.ReceivedAtUTC
		st.NotBeforeUTC = latest.NotBeforeUTC
		st.ServerDelaySeconds = latest.ServerDelaySeconds
	}
	unresolved := func(cause error, reason string) Status {
		st.State, st.Reason, st.RemainingSeconds, st.cause = Unresolved, reason, 0, cause
		return st
	}
	switch {
	case len(s.Findings) > 0:
		return unresolved(runread.ErrCorrupt, s.Findings[0].String())
	case s.Blocking() && !ignorePending:
		st := unresolved(runread.ErrPending, record.MarkerName+": "+s.MarkerProblem())
		st.abandoned = s.DeadMarker()
		return st
	case newest.ReceivedAtUTC != 0 && now.Unix() < newest.ReceivedAtUTC:
		return unresolved(nil, fmt.Sprintf("clock regression: now (%d) is before received_at_utc %d recorded in %s",
			now.Unix(), newest.ReceivedAtUTC, newest.name))
	case latest == nil:
		st.State, st.Reason = Clear, "no backoff entries"
		if s.Manifest != nil && s.Manifest.Legacy {
			st.Reason = "legacy run (no backoff_version): no backoff entries"
		}
		return st
	}
	if now.Before(time.Unix(latest.NotBeforeUTC, 0)) {
		st.State, st.RemainingSeconds, st.Reason = Waiting, remainingSeconds(latest.NotBeforeUTC, now), latest.why
		st.reviewed = latest.pending
		return st
	}
	st.State = Elapsed
	st.Reason = fmt.Sprintf("%s: restriction elapsed; only otherwise eligible uploads may proceed", latest.name)
	return st
}

// restriction is one recorded bound on network access: a timed backoff entry's, a
// restriction review's, or a pending review's (a lost response's unknown restriction).
type restriction struct {
	name string
	record.TimingJSON
	why     string // the waiting status's reason
	pending bool   // a pending review's
}

// restrictions returns the run's restrictions in record order.
func restrictions(s *runread.Snapshot) []restriction {
	var out []restriction
	for _, er := range s.Entries() {
		if e := er.Entry(); e.Timing != nil && record.Untimed(*e) == "" {
			out = append(out, restriction{er.Name, *e.Timing, fmt.Sprintf(
				"%s: server restriction (retry_after %s, server delay %d s) until not_before_utc",
				er.Name, e.RetryAfter.Kind, e.Timing.ServerDelaySeconds), false})
		}
	}
	for _, rr := range s.Reviews() {
		r := rr.Review()
		reviewed := func(notBefore int64, what string) {
			d := notBefore - r.ReviewedAtUTC
			out = append(out, restriction{rr.Name, record.TimingJSON{ReceivedAtUTC: r.ReviewedAtUTC, NotBeforeUTC: notBefore, ServerDelaySeconds: d},
				fmt.Sprintf("%s: %s: waits %d s until not_before_utc", rr.Name, what, d), r.Marker != nil})
		}
		if rs := r.Restriction; rs != nil {
			reviewed(rs.NotBeforeUTC, "restriction review of "+rs.Entry+", whose server restriction has no timing")
		}
		if m := r.Marker; m != nil {
			reviewed(m.NotBeforeUTC, "pending review of an abandoned request, whose restriction is unknown")
		}
	}
	return out
}

// remainingSeconds is the whole seconds, rounded up, from now until the Unix second
// notBefore: ceil(notBefore - (sec + frac)) = notBefore - sec. In seconds, not a
// time.Duration (which saturates at 292 years and overflowed when rounded up); it
// saturates at the int64 bounds for any input.
func remainingSeconds(notBefore int64, now time.Time) int64 {
	sec := now.Unix()
	switch {
	case sec < 0 && notBefore > math.MaxInt64+sec:
		return math.MaxInt64
	case sec > 0 && notBefore < math.MinInt64+sec:
		return 0
	}
	return max(notBefore-sec, 0)
}

// ShardView is one shard's line of a run at a glance ([Status.Shards]):
// its state, its marker and the worker that holds it, and its files per
// class. A run without shards has one line, for the run itself.
type ShardView struct {
	// Shard names it: "shard-01" … in a parallel run, "." for a run without shards.
	Shard string `json:"shard"`
	// State is the shard's own state: unresolved while its marker is dead
	// (as the run is), else its records' state.
	State State `json:"state"`
	// Marker is "" without a marker; "live" for a request in flight (of
	// this Journal, or another worker's that is not abandoned); "dead"
	// for an abandoned one (its worker died, or is stuck: see
	// [Journal.ReviewPendingMarker]; a dead CLAIM never sent and blocks
	// nothing: the next worker removes it); "resolved" for one a pending
	// review resolved and that is still there.
	Marker string `json:"marker"`
	// Method is the marker's: an HTTP method (the upload's, once it began
	// under a claim), CLAIM for a file [Journal.Next] handed out whose
	// upload did not begin, REVIEW for a review being written.
	Method     string `json:"method,omitempty"`
	FileDigest string `json:"file_digest,omitempty"` // the file the marker names, if any
	// Host and PID name the worker that wrote the marker, when it says.
	Host       string            `json:"host,omitempty"`
	PID        int               `json:"pid,omitempty"`
	AgeSeconds int64             `json:"age_seconds,omitempty"` // the marker's age by its begun_at_utc
	Files      map[FileState]int `json:"files"`                 // the shard's planned files per class (as Status.Files)
}

// Marker states of a [ShardView].
const (
	markerLive     = "live"
	markerDead     = "dead"
	markerResolved = "resolved"
)
