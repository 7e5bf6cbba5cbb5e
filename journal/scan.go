package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// errNoRun is the error of a directory that is empty: it holds no run.
var errNoRun = errors.New("holds no run (no run.json)")

// snapshot is the verified state of a run directory at one moment.
type snapshot struct {
	files     int
	manifest  *record.ManifestInfo // nil when run.json is missing or unusable
	planFiles []string             // plan.json's file digests, sorted; nil without a usable plan.json
	// recs are the records that passed their checks (admit), in seq order;
	// byFile indexes them by the file they name (namedFile).
	recs     []*rec
	byFile   map[string][]*rec
	badFiles map[string]string // by file hex prefix: a receipt or part receipt failing verification (attempted)
	// The marker, when present: pendingFile is the file a readable one
	// names, pendingID its version, NUL, its bytes, pendingDigest its
	// bytes' digest; pendingResolved the pending review resolving it (it
	// then blocks nothing: pending-review); pendingLive what the store tells
	// of its worker (R83); pendingReview, a review's marker (sends nothing);
	// pendingUnsent, a dead worker's claim that never sent (dead-claim-heals).
	pending, pendingReview         bool
	pendingUnsent                  bool
	pendingLive                    store.Liveness
	pendingFile, pendingID         string
	pendingDigest, pendingResolved string
	// leftovers are the stale temporary files (staleTemp), listed apart from the findings.
	findings  store.Findings
	leftovers []Finding
	// seq holds the records with a run link, by seq (deletion-detected);
	// lastSeq is the highest; heads the heads listed (the highest counts).
	seq       map[int]rec
	lastSeq   int
	heads     []string
	begun     *begunHead         // an upload begun whose record is still to come (R85), else nil
	broken    int                // the records that fail their own checks
	seqBroken bool               // the sequence check found something: scanRun lists again (a write in progress?)
	listed    []store.ListedName // the listing
	light     bool               // a lightView's scan: restrictions and the marker, no sequence check
	gen       uint64             // scanGen: of two snapshots of one run, the greater was listed later
	cache     map[string]any     // the parsed immutable files by name: a refresh reads only new ones
}

func newSnapshot() *snapshot {
	return &snapshot{
		byFile:   map[string][]*rec{},
		badFiles: map[string]string{},
		cache:    map[string]any{},
		seq:      map[int]rec{},
	}
}

// register adds a self-verified record to the run's sequence.
func (s *snapshot) register(name string, v any) {
	r, ok := v.(loaded)
	if _, head := r.body.(*record.HeadBody); !ok || head || r.Seq == 0 && s.manifest != nil && s.manifest.Legacy {
		return // not a record, a head, or a legacy run's evidence (outside the sequence)
	}
	if r.Seq == 0 {
		s.addFinding(name, "seq 0: not in the run's sequence (made by hand, or from a legacy run)")
		return
	}
	if prior, ok := s.seq[r.Seq]; ok && prior.name != name {
		s.addFinding(name, "seq %d is also held by %s (copied or replayed)", r.Seq, prior.name)
		return
	}
	s.seq[r.Seq] = rec{name, r}
	s.lastSeq = max(s.lastSeq, r.Seq)
}

// nextLink is the seq and prev of the next record this Journal writes;
// seq 0 when the manifest is unusable (nothing is written then).
func (s *snapshot) nextLink() (int, record.Link) {
	switch {
	case s.manifest == nil:
		return 0, record.Link{}
	case s.lastSeq == 0:
		return 1, record.Link{Name: record.ManifestName, Digest: s.manifest.Genesis}
	}
	r := s.seq[s.lastSeq]
	return s.lastSeq + 1, record.Link{Name: r.name, Digest: r.Digest}
}

// begunHead is a head of an upload begun whose record is still to come.
type begunHead struct {
	name string
	record.Env
	req record.BegunRequest
}

// addFinding adds a finding; on a nil snapshot (a read that keeps none) it does nothing.
func (s *snapshot) addFinding(file, format string, args ...any) {
	if s != nil {
		s.findings.Add(file, format, args...)
	}
}

func (s *snapshot) planDigest() string {
	if s.manifest == nil {
		return ""
	}
	return s.manifest.PlanDigest
}

// inPlan reports whether the file digest d is in plan.json; true for a run
// without plan.json (nothing to check against).
func (s *snapshot) inPlan(d string) bool {
	if s.planFiles == nil {
		return true
	}
	_, found := slices.BinarySearch(s.planFiles, d)
	return found
}

// allFindings are the findings plus the pending marker, as Verify lists them.
func (s *snapshot) allFindings() []Finding {
	out := append([]Finding(nil), s.findings...)
	if s.blocking() {
		out = append(out, Finding{File: record.MarkerName, Problem: s.markerProblem()})
	}
	return out
}

// The marker's problem, by what the store tells of its worker (R83).
const (
	pendingProblem = "unfinished request: its worker died in flight (no lock or lease holds the marker), so its outcome is unknown: unresolved until `journal review --pending`"
	liveProblem    = "a request in flight: its worker holds the marker live (unresolved until it ends; never reviewed while live)"
	unknownProblem = "a request in flight, or a dead worker's: the store cannot tell (a file system without locks), so it counts as live; once no worker is sending it, `journal review --pending` resolves it"
)

func (s *snapshot) markerProblem() string {
	switch s.pendingLive {
	case store.HoldLive, store.HoldGone:
		return liveProblem
	case store.HoldUnknown:
		return unknownProblem
	}
	return pendingProblem
}

// deadMarker reports whether the store shows the blocking marker's worker
// dead. One whose liveness it cannot tell (no locks) counts as live, never
// as dead: nothing is released, handed out again or blocked on a guess;
// only an operator's pending review (reviewable) resolves it.
func (s *snapshot) deadMarker() bool { return s.blocking() && s.pendingLive == store.HoldNone }

// reviewable reports whether a pending review may resolve the blocking
// marker: a dead one, or one the store cannot tell, on the operator's word.
func (s *snapshot) reviewable() bool {
	return s.deadMarker() || s.blocking() && s.pendingLive == store.HoldUnknown
}

// bounded reports whether a restriction review bounds the entry name.
func (s *snapshot) bounded(name string) bool {
	return slices.ContainsFunc(s.recs, func(r *rec) bool {
		rv := r.review()
		return rv != nil && rv.Restriction != nil && rv.Restriction.Entry == name
	})
}

// blocking reports whether a marker exists that no pending review resolves
// and that is no dead worker's claim that never sent.
func (s *snapshot) blocking() bool { return s.pending && s.pendingResolved == "" && !s.pendingUnsent }

// unsent reports whether a dead worker's claim of file d never began its
// upload (docs/policy.md: dead-claim-heals): no begun head, and d's records
// still make it eligible (a record of d is an upload begun, at work or done).
// A light scan has neither heads nor receipts: it reads the run whole.
func (s *snapshot) unsent(b *store.Loc, d string, now time.Time) bool {
	if s.light {
		plain := *b
		plain.Light = nil
		full, err := scanRun(&plain, s, now)
		return err == nil && full.pendingUnsent && full.pendingDigest == s.pendingDigest
	}
	return d != "" && s.begun == nil && s.decide(d, NewApproval, Status{State: Clear}, true).Upload
}

// staleTemp is the age from which a durable write's temporary file is an interrupted
// write's leftover, not a write in progress (temporary-files-are-not-findings).
const staleTemp = 60 * time.Second

// scanGen numbers the scans of this process (snapshot.gen).
var scanGen atomic.Uint64

// scanRun is scan of the run kept in b at now (the age of temporary files). A listing
// is not atomic: one taken during a write may hold a record without its head, or a
// head without the old one it replaced. So a broken sequence is listed again, and
// scanned again (3 times at most) while the listing changes: an unchanged one is the run's.
func scanRun(b *store.Loc, prev *snapshot, now time.Time) (*snapshot, error) {
	gen := scanGen.Add(1)
	for try := 0; ; try++ {
		s, err := scanOnce(b, prev, now, gen)
		if err != nil || !s.seqBroken || try == 3 {
			return s, err
		}
		again, _, err := b.List()
		if err != nil || sameNames(s.listed, again) {
			return s, nil
		}
	}
}

// sameNames reports whether the listing b holds exactly the names of a.
func sameNames(a []store.ListedName, b []store.ListedName) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]bool, len(a))
	for _, n := range a {
		seen[n.Name] = true
	}
	return !slices.ContainsFunc(b, func(n store.ListedName) bool { return !seen[n.Name] })
}

// scanOnce is one scan of the run kept in b, of scanRun's gen.
func scanOnce(b *store.Loc, prev *snapshot, now time.Time, gen uint64) (*snapshot, error) {
	des, where, err := b.List()
	switch {
	case err != nil:
		return nil, err
	case len(des) == 0:
		return nil, errNoRun
	}
	s := newSnapshot()
	s.files, s.listed, s.light, s.gen = len(des), des, b.Light != nil, gen
	s.findings = append(s.findings, where...)
	if len(des) > record.MaxFiles {
		// Fail closed without reading anything: the bound on work is the bound on files.
		s.addFinding(".", "more than %d files (limit exceeded)", record.MaxFiles)
		return s, nil
	}
	if !slices.ContainsFunc(des, func(de store.ListedName) bool { return record.IsJournalName(de.Name) }) {
		return nil, ErrNotRun
	}
	var cache map[string]any
	if prev != nil {
		cache = prev.cache
	}
	sort.Slice(des, func(i, k int) bool { return des[i].Name < des[k].Name })
	// Findings about names come last, so that the first finding (the reason
	// of the status) is the most basic one: directory, manifest, records.
	var late []Finding
	byKind := map[*record.FileKind][]string{}
	for _, de := range des {
		name := de.Name
		k, n := record.KindOf(name) // nil for a temporary file and the marker
		_, isTemp := record.ParseTempName(name)
		if name == record.MarkerName {
			s.pending = true // whatever it is, its presence counts
		}
		switch {
		case !de.Regular && (isTemp || name == record.MarkerName || k != nil):
			// Never followed: a link could point anywhere.
			late = append(late, Finding{File: name, Problem: "not a regular file"})
			if k != nil && k.Attempted != nil {
				s.badFiles[k.Attempted(name)] = name
			}
		case isTemp:
			// A write in progress, or an interrupted one's leftover: never a record, never a finding.
			if age := now.Sub(de.ModTime); !de.ModTime.IsZero() && age >= staleTemp {
				s.leftovers = append(s.leftovers, Finding{File: name, Problem: fmt.Sprintf(
					"temporary file of an interrupted write, %d s old: not a record (the marker or the missing manifest it left shows the interruption)",
					int64(age/time.Second))})
			}
		case name == record.MarkerName: // counted above
		case k == nil:
			late = append(late, Finding{File: name, Problem: "unexpected file in the run directory"})
		case k.MaxN > 0 && (n < 1 || n > k.MaxN):
			late = append(late, Finding{File: name, Problem: numberProblem(k)})
		default:
			byKind[k] = append(byKind[k], name)
		}
	}
	s.check(byKind, &loader{s: s, b: b, cache: cache})
	if s.pending {
		// Liveness first, then the bytes: a marker made after the probe is
		// another request's, whose own probe will come. A light scan never
		// reads a live marker: it is a request in flight whatever it names,
		// and no review resolves it (R83).
		s.pendingLive, _ = b.Live()
		skip := s.light && (s.pendingLive == store.HoldLive || s.pendingLive == store.HoldGone)
		if data, version, ok := b.Read(nil, record.MarkerName, record.MaxRecordBytes); !skip && ok {
			s.pendingID, s.pendingDigest = version+"\x00"+string(data), record.DigestOf(data)
			m, ok := record.ParseMarker(data)
			s.pendingReview = ok && m.Method == reviewMethod
			if ok && m.Method != reviewMethod { // a review's marker names its file but sends nothing
				s.pendingFile = m.FileDigest
			}
			for _, r := range s.recs {
				if rv := r.review(); rv != nil && rv.Marker != nil && rv.Marker.Digest == s.pendingDigest {
					s.pendingResolved, s.pendingFile = r.name, ""
				}
			}
			s.pendingUnsent = ok && m.Method == claimMethod && s.pendingResolved == "" && s.pendingLive == store.HoldNone &&
				s.unsent(b, m.FileDigest, now)
		}
	}
	s.findings = append(s.findings, late...)
	return s, nil
}

// planList is the parsed plan.json.
type planList struct {
	files  []string
	digest string
}

func dirError(dir string, err error) error {
	switch {
	case errors.Is(err, errNoRun):
		return fmt.Errorf("journal: %s %w: %w", store.EscapeName(dir), errNoRun, fs.ErrNotExist)
	case err == ErrNotRun:
		return fmt.Errorf("%w: %s", ErrNotRun, store.EscapeName(dir))
	case errors.Is(err, ErrNotRun):
		return err // it names dir and why
	}
	return fmt.Errorf("journal: %w", err)
}

// Finding is one problem of a run directory, found by [InspectStore] or by the
// verification [Open] performs. Any finding makes the run unresolved; its String is the
// line `readrecovery journal verify` prints, a name that is not plain ASCII quoted.
type Finding = store.Finding

// Summary is what [InspectStore] found in a run.
type Summary struct {
	// Entries, Receipts, Parts and Reviews count the records that passed
	// their own checks: backoff entries, commit receipts, part receipts
	// and reviews.
	Entries, Receipts, Parts, Reviews int
	// PlannedFiles is the number of files in plan.json, or -1 for a run
	// written before plan.json existed.
	PlannedFiles int
	// Findings are Verify's findings; none means the run verifies clean.
	Findings []Finding
	// Leftovers are the temporary files of interrupted writes older than a
	// minute: neither records nor findings (the pending marker or a missing
	// manifest shows the interruption), but what a crash left, for an operator.
	Leftovers []Finding
}

// inspect is InspectStore of the run kept in b.
func inspect(b *store.Loc) (Summary, error) {
	n := rootParallel(b)
	rb := b.AsRoot(n) // n == 0: a run without shards
	if err := rb.Nested(); err != nil {
		return Summary{}, err
	}
	now := time.Now()
	s, err := scanRun(rb, nil, now)
	if err != nil {
		return Summary{}, dirError(b.Name, err)
	}
	if n > 0 {
		rootOnly(s) // a root's records live in its shards: none is counted
	}
	sum := Summary{PlannedFiles: -1, Findings: s.allFindings(), Leftovers: s.leftovers}
	if n == 0 {
		s.tally(&sum)
	}
	if s.planFiles != nil {
		sum.PlannedFiles = len(s.planFiles)
	}
	// A parallel run's shards, their findings named "shard-02/backoff-0003.json".
	wants := shardWants(s.planFiles, n)
	for k := 1; k <= n; k++ {
		ss, unread, err := scanShard(rb, k, now)
		switch {
		case err != nil:
			return Summary{}, err
		case unread != "":
			sum.Findings = append(sum.Findings, Finding{File: record.ShardName(k), Problem: unread})
			continue
		}
		fs := ss.allFindings()
		if problem := shardProblem(ss, wants[k-1]); problem != "" {
			fs = append([]Finding{{File: record.ManifestName, Problem: problem}}, fs...)
		}
		for _, f := range fs {
			sum.Findings = append(sum.Findings, Finding{File: record.ShardName(k) + "/" + f.File, Problem: f.Problem})
		}
		for _, f := range ss.leftovers {
			sum.Leftovers = append(sum.Leftovers, Finding{File: record.ShardName(k) + "/" + f.File, Problem: f.Problem})
		}
		ss.tally(&sum)
	}
	return sum, nil
}

// begunRecord names the record a begun upload would write on its 2xx.
func begunRecord(b record.BegunRequest, s *snapshot) string {
	if b.Part {
		return record.PartName(b.FileDigest, len(s.partsOf(b.FileDigest))+1)
	}
	return record.ReceiptNameRound(b.FileDigest, s.view(b.FileDigest, true).round)
}
