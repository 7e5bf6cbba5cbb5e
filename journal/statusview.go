package journal

import (
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

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

// glance adds the counts and the shard lines to st, the status [Journal.Status]
// computed, from what this Journal read last (nothing is read).
func (j *Journal) glance(st Status, now time.Time) Status {
	total := map[FileState]int{}
	known := true
	for _, lane := range j.r.lanes() {
		lane.mu.Lock()
		v := lane.viewLocked(now)
		lane.mu.Unlock()
		known = known && v.Files != nil
		for c, n := range v.Files {
			total[c] += n
		}
		st.Shards = append(st.Shards, v)
	}
	if known {
		st.Files = total
	}
	return st
}

// viewLocked is the lane's line: a file under a live marker is in-flight, under a dead one unknown.
func (lane *run) viewLocked(now time.Time) ShardView {
	s := lane.snap
	v := ShardView{Shard: ".", State: lane.unmarked(now).State}
	if lane.shardNo > 0 {
		v.Shard = record.ShardName(lane.shardNo)
	}
	if s.pending {
		v.Marker = markerLive
		switch {
		case s.pendingResolved != "":
			v.Marker = markerResolved
		case s.pendingUnsent:
			v.Marker = markerDead
		case lane.inflight == nil && s.deadMarker():
			v.Marker, v.State = markerDead, Unresolved
		}
		_, data, _ := strings.Cut(s.pendingID, "\x00") // its version, a NUL, its bytes (none: no parse)
		if m, ok := record.ParseMarker([]byte(data)); ok {
			if b := s.begun; m.Method == claimMethod && b != nil && b.req.FileDigest == m.FileDigest {
				m.Method = b.req.Method // the claim's upload began: its head says what it sends
			}
			v.Method, v.FileDigest, v.Host, v.PID = record.SanitizeNote(m.Method, 16), m.FileDigest, record.SanitizeNote(m.Host, 64), m.PID
			if m.BegunAtUTC > 0 {
				v.AgeSeconds = max(now.Unix()-m.BegunAtUTC, 0)
			}
		}
	}
	if s.planFiles == nil {
		return v // no plan.json: the planned files are unknown
	}
	v.Files = map[FileState]int{FileAcked: 0, FileInFlight: 0, FileNeverAttempted: 0, FileUnknown: 0, FileReviewed: 0}
	ok := Status{State: Clear}
	for _, d := range s.planFiles {
		c := s.decide(d, NoNewApproval, ok, true).State
		if s.blocking() && s.pendingFile == d && c != FileAcked {
			c = FileInFlight
			if v.Marker == markerDead {
				c = FileUnknown
			}
		}
		v.Files[c]++
	}
	return v
}
