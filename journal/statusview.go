package journal

import (
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// Status returns the run's state at now from what this Journal read last: it reads nothing
// and never sleeps. A pending marker, its own request's included, makes a run unresolved; a
// persistence failure keeps it so (open the run again to re-read it). Files and Shards give
// the run at a glance.
func (j *Journal) Status(now time.Time) Status {
	if j.zero() {
		return zeroStatus()
	}
	return j.glance(j.r.status(now), now)
}

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
	v := ShardView{Shard: ".", State: lane.statusLocked(now, true).State}
	if lane.shardNo > 0 {
		v.Shard = record.ShardName(lane.shardNo)
	}
	if s.Pending {
		v.Marker = markerLive
		switch {
		case s.PendingResolved != "":
			v.Marker = markerResolved
		case s.PendingUnsent:
			v.Marker = markerDead
		case lane.inflight == nil && s.DeadMarker():
			v.Marker, v.State = markerDead, Unresolved
		}
		_, data, _ := strings.Cut(s.PendingID, "\x00") // its version, a NUL, its bytes (none: no parse)
		if m, ok := record.ParseMarker([]byte(data)); ok {
			if b := s.Begun; m.Method == record.ClaimMethod && b != nil && b.Req.FileDigest == m.FileDigest {
				m.Method = b.Req.Method // the claim's upload began: its head says what it sends
			}
			v.Method, v.FileDigest, v.Host, v.PID = record.SanitizeNote(m.Method, 16), m.FileDigest, record.SanitizeNote(m.Host, 64), m.PID
			if m.BegunAtUTC > 0 {
				v.AgeSeconds = max(now.Unix()-m.BegunAtUTC, 0)
			}
		}
	}
	if s.PlanFiles == nil {
		return v // no plan.json: the planned files are unknown
	}
	v.Files = map[FileState]int{FileAcked: 0, FileInFlight: 0, FileNeverAttempted: 0, FileUnknown: 0, FileReviewed: 0}
	ok := Status{State: Clear}
	for _, d := range s.PlanFiles {
		fd := decide(s, d, NoNewApproval, ok, true)
		underMarker(&fd, s, record.MarkerName, v.Marker == markerDead) // this Journal's own marker counts too
		v.Files[fd.State]++
	}
	return v
}
