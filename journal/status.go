package journal

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/store"

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

	cause     error // errCorrupt or ErrPending for unresolved, or nil
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
func (s *snapshot) status(now time.Time, ignorePending bool) Status {
	var st Status
	var latest *restriction
	var maxReceived int64
	var maxReceivedName string
	for _, r := range s.restrictions() {
		if latest == nil || r.NotBeforeUTC >= latest.NotBeforeUTC {
			latest = &r
		}
		if r.ReceivedAtUTC > maxReceived {
			maxReceived, maxReceivedName = r.ReceivedAtUTC, r.name
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
	case len(s.findings) > 0:
		return unresolved(errCorrupt, s.findings[0].String())
	case s.blocking() && !ignorePending:
		st := unresolved(ErrPending, record.MarkerName+": "+s.markerProblem())
		st.abandoned = s.pendingLive == store.HoldNone
		return st
	case maxReceived != 0 && now.Unix() < maxReceived:
		return unresolved(nil, fmt.Sprintf("clock regression: now (%d) is before received_at_utc %d recorded in %s",
			now.Unix(), maxReceived, maxReceivedName))
	case latest == nil:
		st.State, st.Reason = Clear, "no backoff entries"
		if s.manifest != nil && s.manifest.Legacy {
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
func (s *snapshot) restrictions() []restriction {
	var out []restriction
	for _, er := range s.entries() {
		if e := er.entry(); e.Timing != nil && record.Untimed(*e) == "" {
			out = append(out, restriction{er.name, *e.Timing, fmt.Sprintf(
				"%s: server restriction (retry_after %s, server delay %d s) until not_before_utc",
				er.name, e.RetryAfter.Kind, e.Timing.ServerDelaySeconds), false})
		}
	}
	for _, rr := range s.reviews() {
		r := rr.review()
		reviewed := func(notBefore int64, what string) {
			d := notBefore - r.ReviewedAtUTC
			out = append(out, restriction{rr.name, record.TimingJSON{ReceivedAtUTC: r.ReviewedAtUTC, NotBeforeUTC: notBefore, ServerDelaySeconds: d},
				fmt.Sprintf("%s: %s: waits %d s until not_before_utc", rr.name, what, d), r.Marker != nil})
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
