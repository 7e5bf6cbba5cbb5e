package journal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/redact"
)

// defaultParallelWait is the pending wait without [WithPendingWait] (death is the store's: R83).
const defaultParallelWait = 30 * time.Second

// WithParallel makes a new run a parallel one of n shards, 2 to 16
// (docs/policy.md: parallel-shards): up to n journaled requests in flight
// at once, each under its shard's marker. An existing parallel run opens
// with or without the option; n must then match, and the option on a run
// created without it is an error.
func WithParallel(n int) Option {
	return optionFunc(func(c *config) { c.parallel, c.parallelSet = n, true })
}

// root is a parallel run's root (R82: its own type, never a run): its
// manifest and plan, read once at open (they never change), and its shards,
// each a run. It routes each call to its shard and merges their statuses.
type root struct {
	clock  clock.Clock
	snap   *runread.Snapshot // the root's own scan at open (read only after)
	n      int
	shards []*run   // shard k is shards[k-1]
	wants  []string // shardWants of the root plan

	// mu guards what follows: a leaf lock, taken with a shard's mu held or
	// none, and nothing taken under it.
	mu sync.Mutex
	// views are the light scans of the check across shards (lightView),
	// never a shard's own snapshot (its mu guards that).
	views   []*runread.Snapshot
	markers []store.LightMarker // per shard, the marker bytes a light scan read last
	failure string              // a shard's persistence failure
}

func (p *root) lanes() []*run     { return p.shards }
func (p *root) lane(d string) int { return record.ShardIndex(d, p.n) - 1 }

// route is the shard of the file req's context names (WithUpload,
// WithUploadPart, as Begin binds it), else of its URL digest.
func (p *root) route(ctx context.Context, req readrecovery.JournalRequest) *run {
	return p.shards[p.lane(cmp.Or(requestMarker(ctx, req).FileDigest, req.URLDigest))]
}

// Begin is [Journal.Begin] in the request's shard, whose reasons name it.
func (p *root) Begin(ctx context.Context, req readrecovery.JournalRequest) error {
	sj := p.route(ctx, req)
	err := sj.Begin(ctx, req)
	if re, ok := errors.AsType[*RestrictedError](err); ok && !re.Status.named {
		re.Status.Reason = runread.ShardReason(sj.shardNo, re.Status.Reason)
	}
	return err
}

// noteFailure records a shard's persistence failure: the run is unresolved from then on.
func (p *root) noteFailure(k int, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failure == "" {
		p.failure = record.ShardName(k) + ": " + why
	}
}

// shardStatus is one shard's part of the run's status.
type shardStatus struct {
	k      int
	st     Status // the shard's status, its markers left out
	stale  bool   // its marker's worker is dead (R83): it blocks every shard
	review bool   // its marker may be reviewed: dead, or liveness unknown
	marker bool   // it shows a marker no review resolves
	gone   bool   // an upload begun whose marker was removed by hand (R85)
}

// shardStateLocked is shard k's part from its snapshot s and its Journal's
// failure; judge says s is the latest sight of the shard's marker.
func (p *root) shardStateLocked(k int, s *runread.Snapshot, failed string, now time.Time, judge bool) shardStatus {
	ss := shardStatus{k: k, marker: judge && s.Blocking()}
	switch problem := runread.ShardProblem(s, p.wants[k-1]); {
	case failed != "":
		ss.st = Status{State: Unresolved, Reason: "persistence failure: " + failed}
	case problem != "":
		ss.st = Status{State: Unresolved, Reason: record.ManifestName + ": " + problem, cause: runread.ErrCorrupt}
	default:
		ss.st = statusOf(s, now, true)
	}
	if judge {
		ss.stale, ss.review = s.DeadMarker(), s.Reviewable()
		ss.gone = !s.Pending && s.Begun != nil
	}
	return ss
}

// merge is the run's status from its shards' parts (docs/policy.md:
// parallel-shards); reasons name the shard.
func (p *root) merge(parts []shardStatus) (st Status) {
	defer func() { st.named = true }()
	if len(p.snap.Findings) > 0 {
		return Status{State: Unresolved, Reason: p.snap.Findings[0].String(), cause: runread.ErrCorrupt}
	}
	p.mu.Lock()
	failure := p.failure
	p.mu.Unlock()
	if failure != "" {
		return Status{State: Unresolved, Reason: "persistence failure: " + failure}
	}
	out := Status{State: Clear}
	inflight := 0
	for _, ps := range parts {
		st := ps.st
		st.Reason = runread.ShardReason(ps.k, st.Reason)
		if st.State == Unresolved {
			return st
		}
		if ps.stale {
			return Status{State: Unresolved, cause: ErrPending, abandoned: true, Reason: fmt.Sprintf(
				"%s: %s (`journal review --pending --marker %s`)", record.MarkerRef(ps.k), runread.PendingProblem, record.MarkerRef(ps.k))}
		}
		if ps.marker {
			inflight++
		}
		// The latest restriction decides: waiting over elapsed over clear.
		switch {
		case st.State == Waiting && (out.State != Waiting || st.NotBeforeUTC > out.NotBeforeUTC),
			st.State == Elapsed && (out.State == Clear || out.State == Elapsed && st.NotBeforeUTC > out.NotBeforeUTC):
			out = st
		}
	}
	if out.State == Clear {
		out.Reason = "no backoff entries"
	}
	if inflight > 0 {
		out.Reason += fmt.Sprintf("; %d request(s) in flight", inflight)
	}
	return out
}

// parts is every shard's part from its snapshot and, when a check across
// shards read it later, from that view too; each shard's mu in turn, never
// two at once. refresh reads every shard again first; gate skips a shard
// whose mu is held, never waiting for a request of this Journal.
func (p *root) parts(ctx context.Context, now time.Time, refresh, gate bool) []shardStatus {
	if refresh {
		var wg sync.WaitGroup
		for _, sj := range p.shards {
			wg.Go(func() { // the shards are read at the same time
				sj.mu.Lock()
				sj.refreshFinishing(ctx)
				sj.mu.Unlock()
			})
		}
		wg.Wait()
	}
	out := make([]shardStatus, 0, p.n)
	for i, sj := range p.shards {
		switch {
		case !gate:
			sj.mu.Lock()
		case !sj.mu.TryLock():
			continue
		}
		s, failed := sj.snap, sj.failed
		p.mu.Lock()
		v := p.views[i]
		later := v != nil && v.Light && v.Gen > s.Gen
		out = append(out, p.shardStateLocked(i+1, s, failed, now, !later))
		if later {
			out = append(out, p.shardStateLocked(i+1, v, "", now, true))
		}
		p.mu.Unlock()
		sj.mu.Unlock()
	}
	return out
}

// others is the check across shards under shard k's claim (its mu held):
// every other shard scanned at once, reading only records not yet seen.
func (p *root) others(ctx context.Context, k int, now time.Time) Status {
	parts := make([]shardStatus, p.n)
	ref := p.shards[k-1].b.ChangeTime() // after the claim: its marker changed the shard
	var wg sync.WaitGroup
	for i, sj := range p.shards {
		if i+1 == k {
			continue
		}
		wg.Go(func() {
			p.mu.Lock()
			prev := p.views[i]
			p.mu.Unlock()
			l := sj.b.With(ctx)
			l.Light = &store.LightView{Mu: &p.mu, Last: &p.markers[i], Ref: ref}
			s, err := runread.ScanRun(l, prev, now)
			if err != nil {
				s = runread.NewSnapshot()
				s.Light = true
				s.Findings.Add(".", "cannot read the shard: %s", redact.Text(err.Error()))
			}
			p.mu.Lock()
			if v := p.views[i]; v == nil || v.Gen < s.Gen {
				p.views[i] = s
			}
			parts[i] = p.shardStateLocked(i+1, s, "", now, true)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	return p.merge(slices.Delete(parts, k-1, k))
}

func (p *root) status(now time.Time) Status {
	return p.merge(p.parts(context.Background(), now, false, false))
}

// gate reads nothing (but with refresh: every shard) and leaves out a shard
// amid a request of this Journal (a Complete's fsyncs): that request checks
// the run under its claim, and Next's claim is checked across shards by its Begin.
func (p *root) gate(ctx context.Context, now time.Time, refresh bool) Status {
	return p.merge(p.parts(ctx, now, refresh, !refresh))
}

// Admit decides a request of a file from what this process read last and
// reads every shard again only when that refuses (docs/policy.md: "Shards
// in detail").
func (p *root) Admit(ctx context.Context, now time.Time) error {
	if _, ok := ctx.Value(uploadKey{}).(uploadMark); ok && p.merge(p.parts(ctx, now, false, false)).Allows() {
		return nil
	}
	if st := p.merge(p.parts(ctx, now, true, false)); !st.Allows() {
		return &RestrictedError{Status: st}
	}
	return nil
}

// ReviewPendingMarker is [Journal.ReviewPendingMarker] of a parallel run.
func (p *root) ReviewPendingMarker(ctx context.Context, marker, note string, notBefore int64) (ReviewRecord, error) {
	k, name, ok := record.ParseShardRef(marker)
	if marker != "" && (!ok || name != record.MarkerName || k > p.n) {
		return ReviewRecord{}, fmt.Errorf("%w: %s is not a marker of this run (shard-01/%s to %s)", errReviewRefused, store.EscapeName(marker), record.MarkerName, record.MarkerRef(p.n))
	}
	if marker == "" { // the shard's review checks notBefore
		var stale, live []string
		for _, ps := range p.parts(ctx, p.clock.Now(), true, false) {
			switch {
			case ps.gone || ps.marker && ps.review:
				stale, k = append(stale, record.MarkerRef(ps.k)), ps.k
			case ps.marker:
				live = append(live, record.MarkerRef(ps.k))
			}
		}
		switch {
		case len(stale) > 1:
			return ReviewRecord{}, fmt.Errorf("%w: %d dead markers: %s; name one with --marker", errReviewRefused, len(stale), strings.Join(stale, ", "))
		case len(stale) == 0 && len(live) > 0:
			return ReviewRecord{}, fmt.Errorf("%w: %w: every marker is held by its live worker: %s", errReviewRefused, errLive, strings.Join(live, ", "))
		case len(stale) == 0:
			return ReviewRecord{}, fmt.Errorf("%w: no pending marker in any shard: nothing to resolve", errReviewRefused)
		}
	}
	return p.review(k, func(sj *run) (ReviewRecord, error) { return sj.ReviewPendingMarker(ctx, "", note, notBefore) })
}

// review is shard k's review by call, named by its place in the root.
func (p *root) review(k int, call func(sj *run) (ReviewRecord, error)) (ReviewRecord, error) {
	r, err := call(p.shards[k-1])
	r.Name, r.Marker = record.InShard(k, r.Name), record.InShard(k, r.Marker)
	return r, err
}

// ReviewRestriction reviews "shard-KK/backoff-NNNN.json".
func (p *root) ReviewRestriction(ctx context.Context, entry, note string, notBefore int64) (ReviewRecord, error) {
	k, name, ok := record.ParseShardRef(entry)
	if !ok || k > p.n {
		return ReviewRecord{}, fmt.Errorf("%w: %s: in a parallel run name the entry with its shard (shard-01/backoff-0001.json)", errReviewRefused, store.EscapeName(entry))
	}
	return p.review(k, func(sj *run) (ReviewRecord, error) { return sj.ReviewRestriction(ctx, name, note, notBefore) })
}

// Review is [Journal.Review] in the file's shard, which checks it.
func (p *root) Review(ctx context.Context, file string, decision Decision, note string) (ReviewRecord, error) {
	return p.review(p.lane(fileRef(file))+1, func(sj *run) (ReviewRecord, error) { return sj.Review(ctx, file, decision, note) })
}

// continuation is PlanContinuation (files given) or RecordedPlan (nil): each file
// decided in its shard under the merged status; under another worker's
// live marker in-flight, under a dead one unknown.
func (p *root) continuation(files []PlannedFile, approval Approval, now time.Time) (Continuation, error) {
	digests, ids := p.snap.PlanFiles, map[string]string{}
	if files != nil {
		_, want, err := digestOfPlan(files)
		if err != nil {
			return Continuation{}, err
		}
		if p.snap.Manifest.PlanDigest != want {
			return Continuation{}, fmt.Errorf("%w: the run records plan %s, not %s", ErrPlanMismatch, p.snap.Manifest.PlanDigest, want)
		}
		digests = nil
		for _, f := range files {
			d := f.Digest()
			digests, ids[d] = append(digests, d), f.ID
		}
	}
	parts := p.parts(context.Background(), now, true, false)
	if files == nil && digests == nil {
		return Continuation{}, fmt.Errorf("%w: the root's plan.json cannot be read, so the plan is unknown", runread.ErrCorrupt)
	}
	c := Continuation{Status: p.merge(parts)}
	byShard := make([][]int, p.n)
	for i, d := range digests {
		byShard[p.lane(d)] = append(byShard[p.lane(d)], i)
	}
	c.Files = make([]FileDecision, len(digests))
	for i, sj := range p.shards {
		sj.mu.Lock()
		s, own := sj.snap, sj.inflight != nil
		for _, at := range byShard[i] {
			d := digests[at]
			fd := decide(s, d, approval, c.Status, true)
			if !own {
				underMarker(&fd, s, record.MarkerRef(i+1), s.DeadMarker())
			}
			fd.ID = ids[d]
			c.Files[at] = fd
		}
		sj.mu.Unlock()
	}
	return c, nil
}

// openParallel opens (with create, makes) the run of n shards rooted at ub.
// A creation writes the root's manifest last: a root with one has all its
// shards, and a shard missing later is a deletion (unresolved).
func openParallel(ctx context.Context, ub *store.Loc, create bool, cfg config, planFiles []string, planDigest string, n int) (*root, error) {
	dir := ub.Name
	urb := ub.AsRoot(n)
	rb := urb.With(ctx)
	wait := cmp.Or(cfg.pendingWait, defaultParallelWait) // WithPendingWait sets only a positive wait
	if err := rb.Nested(); err != nil {
		return nil, err
	}
	s, err := openRun(urb, cfg, wait, nil).openSnap(rb, create, cfg.plan != nil, planFiles, planDigest, n, func() error {
		for k := 1; k <= n; k++ {
			sub := record.ShardPlan(planFiles, k, n)
			if _, err := openRun(rb.Shard(k), cfg, 0, nil).create(sub, record.PlanDigestOf(sub), false, 0, nil); err != nil {
				return fmt.Errorf("%s: %w", record.ShardName(k), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch { // the root's run above is its creation's only
	case s.Manifest != nil && s.Manifest.Parallel == n:
	case s.Manifest != nil && s.Manifest.Parallel == 0:
		return nil, fmt.Errorf("journal: %s was created without WithParallel: open it without the option", store.EscapeName(dir))
	case s.Manifest != nil:
		return nil, fmt.Errorf("journal: %s is a parallel run of %d shards, not %d", store.EscapeName(dir), s.Manifest.Parallel, n)
	default:
		why := "no run.json"
		if len(s.Findings) > 0 {
			why = s.Findings[0].String()
		}
		return nil, fmt.Errorf("%w: %s: its run.json cannot be read (%s)", runread.ErrCorrupt, store.EscapeName(dir), why)
	}
	runread.RootOnly(s)
	p := &root{clock: cfg.clock, snap: s, n: n, wants: runread.ShardWants(s.PlanFiles, n),
		views: make([]*runread.Snapshot, n), markers: make([]store.LightMarker, n)}
	for k := 1; k <= n; k++ {
		ss, _, err := runread.ScanShard(rb, k, cfg.clock.Now())
		if err != nil {
			return nil, err
		}
		sj := openRun(urb.Shard(k), cfg, wait, record.ShardPlan(s.PlanFiles, k, n))
		sj.group, sj.shardNo, sj.snap = p, k, ss
		// The check across shards starts from a copy (the shard adds to its cache).
		p.views[k-1] = &runread.Snapshot{Cache: maps.Clone(ss.Cache), Gen: ss.Gen, Light: true}
		p.shards = append(p.shards, sj)
	}
	return p, nil
}
