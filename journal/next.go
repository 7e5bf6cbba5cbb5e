package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
)

// ErrNoMoreFiles is the error of [Journal.Next] when no file of the plan is
// left to hand out: every one is acked, unknown, skipped, or needs an
// approval this continuation does not have, and no other worker holds a
// file that could still come back. It is wrapped: test with errors.Is.
var ErrNoMoreFiles = errors.New("journal: no more files to hand out")

// nextState is what [Journal.Next] keeps: the plan's IDs and each lane's
// files (lanes are the shards of a parallel run, or the run itself).
type nextState struct {
	plan []PlannedFile // the plan given to Open (WithPlan); nil when none

	once  sync.Once
	ids   map[string]string // file digest → ID
	lanes [][]string        // per lane, its files' digests in plan order

	mu   sync.Mutex
	last int          // the lane of this Journal's last claim, tried first (0: none)
	cur  []laneCursor // per lane, where its first eligible file was seen last
}

// laneCursor is where Next looks first in a lane's files, so that a Next
// costs the same after thousands of uploads as at the start (R112): every
// file before at was not eligible under approval a at the lane's seq. A
// record only makes its file less eligible, but for a review (reupload), so
// the cursor holds while no review follows seq.
type laneCursor struct {
	at, seq int
	a       Approval
}

// first is lane k's first file eligible under a and st in s ("" for none),
// looked for from its cursor, which it moves there.
func (n *nextState) first(k int, s *runread.Snapshot, a Approval, st Status) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, files := &n.cur[k], n.lanes[k]
	if c.a != a || s.Manifest == nil || s.Manifest.Legacy || s.LastSeq < c.seq {
		*c = laneCursor{a: a} // a legacy run's records have no seq to follow
	}
	for q := c.seq + 1; q <= s.LastSeq && c.at > 0; q++ {
		if r := s.Seq[q]; r.Review() != nil {
			c.at = 0
		}
	}
	c.seq = s.LastSeq
	for c.at < len(files) && !decide(s, files[c.at], a, st, true).Upload {
		c.at++
	}
	if c.at < len(files) {
		return files[c.at]
	}
	return ""
}

// Next hands the calling worker the next file of the plan that is eligible
// under the run's status and approval a (as [Journal.PlanContinuation]
// decides) and whose shard has no request in flight, claimed under the
// shard's marker (docs/policy.md: next-hands-out-work). The worker uploads
// it with [WithUpload] (and [WithUploadPart]) through this Journal, whose
// first journaled request adopts the claim, or gives it back with
// [Journal.Release]. While every shard that may still have a file is busy,
// Next waits, polling, within ctx. A dead worker's claim whose upload never
// began is removed and its file handed out again (docs/policy.md:
// dead-claim-heals). While a dead worker's upload that began leaves the run
// unresolved, and then while the run waits for its pending review's
// not-before, Next waits too, reading the run again every 0.5 to 1 s, and
// says why once on slog's default logger (dead-upload-waits).
//
// Errors: one wrapping [ErrNoMoreFiles] when no file is left; a
// *[RestrictedError] when the run is waiting or unresolved for any other
// cause; ctx's error, wrapped, when ctx ends (with the *RestrictedError it
// was waiting out, if any); any other when the claim cannot be written or
// removed (a persistence failure). The Journal must have been opened
// [WithPlan]: the journal stores file digests, never IDs.
func (j *Journal) Next(ctx context.Context, a Approval) (PlannedFile, error) {
	switch {
	case j.zero():
		return PlannedFile{}, errZero
	case ctx == nil:
		return PlannedFile{}, errors.New("journal: next: nil context")
	case j.nx.plan == nil:
		return PlannedFile{}, errors.New("journal: next: the run was opened without WithPlan: Next hands out the plan's files by ID")
	}
	lanes := j.r.lanes()
	j.nx.once.Do(func() {
		j.nx.ids = make(map[string]string, len(j.nx.plan))
		j.nx.lanes = make([][]string, len(lanes))
		j.nx.cur = make([]laneCursor, len(lanes))
		for _, f := range j.nx.plan {
			d := f.Digest()
			j.nx.ids[d] = f.ID
			j.nx.lanes[j.r.lane(d)] = append(j.nx.lanes[j.r.lane(d)], d)
		}
	})
	var held *RestrictedError // the run Next waits out (dead-upload-waits), said once
	for {
		if err := ctx.Err(); err != nil && held != nil {
			return PlannedFile{}, fmt.Errorf("journal: next: %w while waiting: %w", err, held)
		} else if err != nil {
			return PlannedFile{}, fmt.Errorf("journal: next: %w", err)
		}
		var re *RestrictedError
		// While Next waits the gate reads the run: the review is news from the store.
		if st := j.r.gate(ctx, j.clock.Now(), held != nil); !st.Allows() {
			re = &RestrictedError{Status: st}
		}
		busy := false
		for _, i := range j.nx.order() {
			if re != nil {
				break
			}
			d, err := j.tryLane(ctx, lanes[i], i+1, a)
			switch {
			case errors.Is(err, errLaneBusy):
				busy = true
			case errors.As(err, &re):
			case err != nil:
				return PlannedFile{}, err
			case d != "":
				j.nx.mu.Lock()
				j.nx.last = i + 1
				j.nx.mu.Unlock()
				return PlannedFile{ID: j.nx.ids[d]}, nil
			}
		}
		poll := pendingPoll + time.Duration(rand.Int64N(int64(pendingPoll)))
		switch {
		case re != nil && !re.Status.nextWaits():
			return PlannedFile{}, re
		case re != nil:
			if held == nil {
				slog.Warn("journal: Next waits, within its context, for the run to allow uploads again",
					"run", j.dir, "state", re.Status.State, "reason", re.Status.Reason)
			}
			held, poll = re, deadPoll+time.Duration(rand.Int64N(int64(deadPoll)))
		case !busy:
			return PlannedFile{}, fmt.Errorf("%w: every planned file is acked, unknown, skipped or not approved", ErrNoMoreFiles)
		}
		if err := j.clock.Sleep(ctx, poll); err != nil && held == nil {
			return PlannedFile{}, fmt.Errorf("journal: next: while every shard with a file left was busy: %w", err)
		} // else the context's end says above what Next waited for
	}
}

// order is the lane indexes to try: the last claim's first, then most files
// left first (the run ends when its longest shard does), ties at random
// (workers that start together spread across the shards). A lane's files
// left are those from its cursor on, as this Journal saw it last.
func (n *nextState) order() []int {
	n.mu.Lock()
	last, left := n.last, make([]int, len(n.lanes))
	for i, c := range n.cur {
		left[i] = len(n.lanes[i]) - c.at
	}
	n.mu.Unlock()
	out := rand.Perm(len(left))
	sort.SliceStable(out, func(x, y int) bool {
		ix, iy := out[x], out[y]
		if (ix+1 == last) != (iy+1 == last) {
			return ix+1 == last && left[ix] > 0
		}
		return left[ix] > left[iy]
	})
	return out
}

// errLaneBusy is tryLane's: a request in flight in the lane, maybe a file later.
var errLaneBusy = errors.New("journal: next: lane busy")

// tryLane claims lane k's first eligible file ("" when none is left): this
// Journal's slot, a read, the claim's marker, then a read and check under it
// (docs/policy.md: journal-claim-then-check). A claim keeps slot and marker
// until its request ends or Release. Any error but errLaneBusy ends Next.
func (j *Journal) tryLane(ctx context.Context, lane *run, k int, a Approval) (string, error) {
	select {
	case lane.slot <- struct{}{}:
	default:
		return "", errLaneBusy
	}
	lane.mu.Lock()
	defer lane.mu.Unlock()
	claimed := false
	defer func() {
		if !claimed {
			<-lane.slot // the slot stays held only for a claim
		}
	}()
	j.nx.mu.Lock()
	sticky := j.nx.last == k
	j.nx.mu.Unlock()
	for try := 0; try < 3; try++ {
		// The last claim's lane is read only under the new claim, which
		// finds its other workers' records.
		read := try > 0 || !sticky
		if read {
			lane.refreshFinishing(ctx) // removes a dead worker's claim that never sent
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("journal: next: %w", err)
		}
		now := lane.clock.Now()
		s, st := lane.snap, lane.statusLocked(now, true) // another worker's marker is judged below, the claim's own never counts
		if !st.Allows() {
			return "", &RestrictedError{Status: st}
		}
		d := j.nx.first(k-1, s, a, st)
		switch {
		case !read && (d == "" || s.Pending):
			// The last claim's lane, not read: another worker's review may
			// have made a file eligible, or the marker seen last may be gone
			// (a worker whose other lanes are empty would wait forever).
			continue
		case d == "":
			return "", nil
		case s.Blocking() && s.DeadMarker(): // no lock or lease holds it (R83): the marker's status
			st := lane.statusLocked(now, false)
			if lane.shardNo > 0 {
				st.Reason = runread.ShardReason(lane.shardNo, st.Reason)
			}
			return "", &RestrictedError{Status: st}
		case s.Blocking():
			return "", errLaneBusy
		}
		if err := lane.checkLimits(); err != nil {
			return "", err
		}
		m := record.MarkerFile{BackoffVersion: record.BackoffVersion, Method: record.ClaimMethod, FileDigest: d, BegunAtUTC: now.Unix()}
		if err := lane.claim(m); err != nil {
			if errors.Is(err, ErrPending) {
				return "", errLaneBusy // another worker claimed the lane first
			}
			return "", err
		}
		lane.refreshLocked(ctx)
		if decide(lane.snap, d, a, lane.statusLocked(lane.clock.Now(), true), true).Upload && lane.checkLimits() == nil {
			lane.claimed, claimed = d, true
			return d, nil
		}
		// Another worker's record of d came between the read and the
		// claim: give the claim back and look again.
		if err := lane.unclaim(nil); err != nil {
			return "", err
		}
	}
	return "", errLaneBusy
}

// Release gives back the file f that [Journal.Next] handed out and whose
// upload did not begin (unreadable, its context ended, Admit refused it):
// the claim's marker is removed and the file is eligible again, for any
// worker. A file whose upload began (its first request adopted the claim),
// or that Next did not hand to this Journal, is left alone: Release returns
// nil. An error means the marker could not be removed: the run is
// unresolved, as after any persistence failure.
func (j *Journal) Release(f PlannedFile) error {
	if j.zero() {
		return errZero
	}
	d := f.Digest()
	lane := j.r.lanes()[j.r.lane(d)]
	lane.mu.Lock()
	defer lane.mu.Unlock()
	if lane.claimed != d || lane.inflight == nil {
		return nil
	}
	lane.claimed = ""
	err := lane.unclaim(nil)
	<-lane.slot
	return err
}

// beginClaimed is Begin of the first request of the file Next claimed
// (handled false for others): the claim's marker, naming the file (a crash
// leaves it unknown), becomes the request's, checked as beginLocked checks;
// a refusal removes it and frees the slot.
func (j *run) beginClaimed(ctx context.Context, req readrecovery.JournalRequest) (handled bool, err error) {
	m := requestMarker(ctx, req)
	if m.FileDigest == "" {
		return false, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.claimed != m.FileDigest || j.inflight == nil {
		return false, nil
	}
	j.claimed = ""
	now := j.clock.Now()
	m.BegunAtUTC = now.Unix()
	j.inflight = &m
	// Next read this run under the claim, and nothing of it changes while
	// the claim holds (every write is under the marker): only others are read.
	var others Status
	if g := j.group; g != nil {
		others = g.others(ctx, j.shardNo, now)
	}
	if err = j.checkClaimed(m, others, j.checkLimits()); err != nil {
		<-j.slot
	}
	return true, err
}

// workerHost and workerPID name the worker in its marker for `journal
// status`: the host name (sanitized, at most 64 bytes; nothing secret) and the PID.
var workerHost, workerPID = func() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return redact.Text(record.SanitizeNote(h, 64))
}(), os.Getpid()
