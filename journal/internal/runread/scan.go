// Package runread reads a run: one scan of a Store's location into a verified [Snapshot]
// (the records by kind and file, the run's sequence and head, the pending marker and its
// liveness, every finding), the check of a parallel run's shards, what the records say of
// each planned file ([FileState]), and [Inspect]. It writes nothing; the Journal above
// decides and writes.
package runread

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// ErrNoRun is the error of a directory that is empty: it holds no run.
var ErrNoRun = errors.New("holds no run (no run.json)")

// Snapshot is the verified state of a run directory at one moment.
type Snapshot struct {
	Files     int
	Manifest  *record.ManifestInfo // nil when run.json is missing or unusable
	PlanFiles []string             // plan.json's file digests, sorted; nil without a usable plan.json
	// Recs are the records that passed their checks (admit), in seq order;
	// byFile indexes them by the file they name (namedFile).
	Recs     []*Rec
	byFile   map[string][]*Rec
	badFiles map[string]string // by file hex prefix: a receipt or part receipt failing verification (attempted)
	// The marker, when present: pendingFile is the file a readable one
	// names, pendingID its version, NUL, its bytes, pendingDigest its
	// bytes' digest; pendingResolved the pending review resolving it (it
	// then blocks nothing: pending-review); pendingLive what the store tells
	// of its worker (R83); pendingReview, a review's marker (sends nothing);
	// pendingUnsent, a dead worker's claim that never sent (dead-claim-heals).
	Pending, PendingReview         bool
	PendingUnsent                  bool
	PendingLive                    store.Liveness
	PendingFile, PendingID         string
	PendingDigest, PendingResolved string
	// leftovers are the stale temporary files (staleTemp), listed apart from the findings.
	Findings  store.Findings
	leftovers store.Findings
	// Seq holds the records with a run link, by seq (deletion-detected);
	// lastSeq is the highest; heads the heads listed (the highest counts).
	Seq       map[int]Rec
	LastSeq   int
	Heads     []string
	Begun     *BegunHead                    // an upload begun whose record is still to come (R85), else nil
	broken    int                           // the records that fail their own checks
	seqBroken bool                          // the sequence check found something: scanRun lists again (a write in progress?)
	Listed    []store.ListedName            // the listing, sorted by name
	Light     bool                          // a lightView's scan: restrictions and the marker, no sequence check
	Gen       uint64                        // scanGen: of two snapshots of one run, the greater was listed later
	Cache     map[string]any                // the parsed immutable files by name: a refresh reads only new ones
	kinds     map[*record.FileKind][]string // the listed names by kind, sorted (extend)
}

func NewSnapshot() *Snapshot {
	return &Snapshot{
		byFile:   map[string][]*Rec{},
		badFiles: map[string]string{},
		Cache:    map[string]any{},
		Seq:      map[int]Rec{},
	}
}

// register adds a self-verified record to the run's sequence.
func (s *Snapshot) register(name string, v any) {
	r, ok := v.(Loaded)
	if _, head := r.Body.(*record.HeadBody); !ok || head || r.Seq == 0 && s.Manifest != nil && s.Manifest.Legacy {
		return // not a record, a head, or a legacy run's evidence (outside the sequence)
	}
	if r.Seq == 0 {
		s.Findings.Add(name, "seq 0: not in the run's sequence (made by hand, or from a legacy run)")
		return
	}
	if prior, ok := s.Seq[r.Seq]; ok && prior.Name != name {
		s.Findings.Add(name, "seq %d is also held by %s (copied or replayed)", r.Seq, prior.Name)
		return
	}
	s.Seq[r.Seq] = Rec{name, r}
	s.LastSeq = max(s.LastSeq, r.Seq)
}

// NextLink is the seq and prev of the next record this Journal writes;
// seq 0 when the manifest is unusable (nothing is written then).
func (s *Snapshot) NextLink() (int, record.Link) {
	switch {
	case s.Manifest == nil:
		return 0, record.Link{}
	case s.LastSeq == 0:
		return 1, record.Link{Name: record.ManifestName, Digest: s.Manifest.Genesis}
	}
	r := s.Seq[s.LastSeq]
	return s.LastSeq + 1, record.Link{Name: r.Name, Digest: r.Digest}
}

// BegunHead is a head of an upload begun whose record is still to come.
type BegunHead struct {
	Name string
	record.Env
	Req record.BegunRequest
}

func (s *Snapshot) PlanDigest() string {
	if s.Manifest == nil {
		return ""
	}
	return s.Manifest.PlanDigest
}

// InPlan reports whether the file digest d is in plan.json; true for a run
// without plan.json (nothing to check against).
func (s *Snapshot) InPlan(d string) bool {
	if s.PlanFiles == nil {
		return true
	}
	_, found := slices.BinarySearch(s.PlanFiles, d)
	return found
}

// allFindings are the findings plus the pending marker, as Verify lists them.
func (s *Snapshot) allFindings() []store.Finding {
	out := append([]store.Finding(nil), s.Findings...)
	if s.Blocking() {
		out = append(out, store.Finding{File: record.MarkerName, Problem: s.MarkerProblem()})
	}
	return out
}

// The marker's problem, by what the store tells of its worker (R83).
const (
	PendingProblem = "unfinished request: its worker died in flight (no lock or lease holds the marker), so its outcome is unknown: unresolved until `journal review --pending`"
	LiveProblem    = "a request in flight: its worker holds the marker live (unresolved until it ends; never reviewed while live)"
	UnknownProblem = "a request in flight, or a dead worker's: the store cannot tell (a file system without locks), so it counts as live; once no worker is sending it, `journal review --pending` resolves it"
)

// markerProblems holds the marker's problem for each liveness the store tells.
var markerProblems = map[store.Liveness]string{
	store.HoldNone: PendingProblem, store.HoldLive: LiveProblem, store.HoldUnknown: UnknownProblem, store.HoldGone: LiveProblem,
}

func (s *Snapshot) MarkerProblem() string { return markerProblems[s.PendingLive] }

// DeadMarker reports whether the store shows the blocking marker's worker
// dead. One whose liveness it cannot tell (no locks) counts as live, never
// as dead: nothing is released, handed out again or blocked on a guess;
// only an operator's pending review (reviewable) resolves it.
func (s *Snapshot) DeadMarker() bool { return s.Blocking() && s.PendingLive == store.HoldNone }

// Reviewable reports whether a pending review may resolve the blocking
// marker: a dead one, or one the store cannot tell, on the operator's word.
func (s *Snapshot) Reviewable() bool {
	return s.DeadMarker() || s.Blocking() && s.PendingLive == store.HoldUnknown
}

// Bounded reports whether a restriction review bounds the entry name.
func (s *Snapshot) Bounded(name string) bool {
	return slices.ContainsFunc(s.Recs, func(r *Rec) bool {
		rv := r.Review()
		return rv != nil && rv.Restriction != nil && rv.Restriction.Entry == name
	})
}

// Blocking reports whether a marker exists that no pending review resolves
// and that is no dead worker's claim that never sent.
func (s *Snapshot) Blocking() bool { return s.Pending && s.PendingResolved == "" && !s.PendingUnsent }

// unsent reports whether a dead worker's claim of file d never began its
// upload (docs/policy.md: dead-claim-heals): no begun head, and d's records
// still make it eligible (a record of d is an upload begun, at work or done).
// A light scan has neither heads nor receipts: it reads the run whole.
func (s *Snapshot) unsent(b *store.Loc, d string, now time.Time) bool {
	if s.Light {
		plain := *b
		plain.Light = nil
		full, err := ScanRun(&plain, s, now)
		if err == nil && (full.PendingDigest != s.PendingDigest || full.PendingLive != store.HoldNone) {
			s.PendingLive = store.HoldGone // healed since the probe: another marker, or none, is the shard's
		}
		return err == nil && full.PendingUnsent && full.PendingDigest == s.PendingDigest
	}
	_, _, _, again := s.Classify(d, true)
	return d != "" && s.Begun == nil && again
}

// StaleTemp is the age from which a durable write's temporary file is an interrupted
// write's leftover, not a write in progress (temporary-files-are-not-findings).
const StaleTemp = 60 * time.Second

// ScanGen numbers the scans of this process (snapshot.gen).
var ScanGen atomic.Uint64

// ScanRun is scan of the run kept in b at now (the age of temporary files). A listing
// is not atomic: one taken during a write may hold a record without its head, or a
// head without the old one it replaced. So a broken sequence is listed again, and
// scanned again (3 times at most) while the listing changes: an unchanged one is the run's.
func ScanRun(b *store.Loc, prev *Snapshot, now time.Time) (*Snapshot, error) {
	gen := ScanGen.Add(1)
	for try := 0; ; try++ {
		s, err := scanOnce(b, prev, now, gen)
		if err != nil || !s.seqBroken || try == 3 {
			return s, err
		}
		again, _, err := b.List()
		slices.SortFunc(again, byName) // as scanOnce sorted s.Listed
		if err != nil || slices.EqualFunc(s.Listed, again, func(x, y store.ListedName) bool { return x.Name == y.Name }) {
			return s, nil
		}
	}
}

func byName(a, b store.ListedName) int { return strings.Compare(a.Name, b.Name) }

// scanOnce is one scan of the run kept in b, of scanRun's gen.
func scanOnce(b *store.Loc, prev *Snapshot, now time.Time, gen uint64) (*Snapshot, error) {
	des, where, err := b.List()
	switch {
	case err != nil:
		return nil, err
	case len(des) == 0:
		return nil, ErrNoRun
	}
	s := NewSnapshot()
	s.Files, s.Listed, s.Light, s.Gen = len(des), des, b.Light != nil, gen
	s.Findings = append(s.Findings, where...)
	if len(des) > record.MaxFiles {
		// Fail closed without reading anything: the bound on work is the bound on files.
		s.Findings.Add(".", "more than %d files (limit exceeded)", record.MaxFiles)
		return s, nil
	}
	if !slices.ContainsFunc(des, func(de store.ListedName) bool { return record.IsJournalName(de.Name) }) {
		return nil, store.ErrNotRun
	}
	var cache map[string]any
	if prev != nil {
		cache = prev.Cache
	}
	slices.SortFunc(des, byName)
	// Findings about names come last, so that the first finding (the reason
	// of the status) is the most basic one: directory, manifest, records.
	var late store.Findings
	byKind := map[*record.FileKind][]string{}
	for _, de := range des {
		name := de.Name
		k, n := record.KindOf(name) // nil for a temporary file and the marker
		_, isTemp := record.ParseTempName(name)
		if name == record.MarkerName {
			s.Pending = true // whatever it is, its presence counts
		}
		switch {
		case !de.Regular && (isTemp || name == record.MarkerName || k != nil):
			// Never followed: a link could point anywhere.
			late.Add(name, "not a regular file")
			if k != nil && k.Attempted {
				_, _, hex := record.ParseName(name)
				s.badFiles[hex] = name
			}
		case isTemp:
			// A write in progress, or an interrupted one's leftover: never a record, never a finding.
			if age := now.Sub(de.ModTime); !de.ModTime.IsZero() && age >= StaleTemp {
				s.leftovers.Add(name, "temporary file of an interrupted write, %d s old: not a record (the marker or the missing manifest it left shows the interruption)",
					int64(age/time.Second))
			}
		case name == record.MarkerName: // counted above
		case k == nil:
			late.Add(name, "unexpected file in the run directory")
		case k.MaxN > 0 && (n < 1 || n > k.MaxN):
			late.Add(name, "number outside 0001..%04d (limit exceeded)", k.MaxN)
		default:
			byKind[k] = append(byKind[k], name)
		}
	}
	if !s.extend(prev, byKind, b) {
		s.check(byKind, &loader{s: s, b: b, cache: cache})
	}
	if s.Pending {
		// Liveness first, then the bytes: a marker made after the probe is
		// another request's, whose own probe will come. A light scan never
		// reads a live marker: it is a request in flight whatever it names,
		// and no review resolves it (R83).
		var probed string
		s.PendingLive, probed = b.Live()
		skip := s.Light && (s.PendingLive == store.HoldLive || s.PendingLive == store.HoldGone)
		if data, version, ok := b.Read(nil, record.MarkerName, record.MaxRecordBytes); !skip && ok {
			if s.PendingLive == store.HoldNone && (version == "" || version != probed) {
				// The bytes may be a newer marker's (a dead claim healed, and
				// claimed again, since the probe): a probe after the read
				// judges them, never a live worker's as dead.
				s.PendingLive, _ = b.Live()
			}
			s.PendingID, s.PendingDigest = version+"\x00"+string(data), record.DigestOf(data)
			m, ok := record.ParseMarker(data)
			s.PendingReview = ok && m.Method == record.ReviewMethod
			if ok && m.Method != record.ReviewMethod { // a review's marker names its file but sends nothing
				s.PendingFile = m.FileDigest
			}
			for _, r := range s.Recs {
				if rv := r.Review(); rv != nil && rv.Marker != nil && rv.Marker.Digest == s.PendingDigest {
					s.PendingResolved, s.PendingFile = r.Name, ""
				}
			}
			s.PendingUnsent = ok && m.Method == record.ClaimMethod && s.PendingResolved == "" && s.PendingLive == store.HoldNone &&
				s.unsent(b, m.FileDigest, now)
		} else if !skip && s.PendingLive == store.HoldNone {
			s.PendingLive, _ = b.Live() // unread: removed since the probe (healed), or a dead one's
		}
	}
	s.Findings = append(s.Findings, late...)
	return s, nil
}

// PlanList is the parsed plan.json.
type PlanList struct {
	Files  []string
	Digest string
}

func DirError(dir string, err error) error {
	switch {
	case errors.Is(err, ErrNoRun):
		return fmt.Errorf("journal: %s %w: %w", store.EscapeName(dir), ErrNoRun, fs.ErrNotExist)
	case err == store.ErrNotRun:
		return fmt.Errorf("%w: %s", store.ErrNotRun, store.EscapeName(dir))
	case errors.Is(err, store.ErrNotRun):
		return err // it names dir and why
	}
	return fmt.Errorf("journal: %w", err)
}

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
	Findings []store.Finding
	// Leftovers are the temporary files of interrupted writes older than a
	// minute: neither records nor findings (the pending marker or a missing
	// manifest shows the interruption), but what a crash left, for an operator.
	Leftovers []store.Finding
}

// Inspect is InspectStore of the run kept in b.
func Inspect(b *store.Loc) (Summary, error) {
	n := RootParallel(b)
	rb := b.AsRoot(n) // n == 0: a run without shards
	if err := rb.Nested(); err != nil {
		return Summary{}, err
	}
	now := time.Now()
	s, err := ScanRun(rb, nil, now)
	if err != nil {
		return Summary{}, DirError(b.Name, err)
	}
	if n > 0 {
		RootOnly(s) // a root's records live in its shards: none is counted
	}
	sum := Summary{PlannedFiles: -1, Findings: s.allFindings(), Leftovers: s.leftovers}
	if n == 0 {
		s.tally(&sum)
	}
	if s.PlanFiles != nil {
		sum.PlannedFiles = len(s.PlanFiles)
	}
	// A parallel run's shards, their findings named "shard-02/backoff-0003.json".
	wants := ShardWants(s.PlanFiles, n)
	for k := 1; k <= n; k++ {
		ss, unread, err := ScanShard(rb, k, now)
		switch {
		case err != nil:
			return Summary{}, err
		case unread != "":
			sum.Findings = append(sum.Findings, store.Finding{File: record.ShardName(k), Problem: unread})
			continue
		}
		fs := ss.allFindings()
		if problem := ShardProblem(ss, wants[k-1]); problem != "" {
			fs = append([]store.Finding{{File: record.ManifestName, Problem: problem}}, fs...)
		}
		for _, f := range fs {
			sum.Findings = append(sum.Findings, store.Finding{File: record.ShardName(k) + "/" + f.File, Problem: f.Problem})
		}
		for _, f := range ss.leftovers {
			sum.Leftovers = append(sum.Leftovers, store.Finding{File: record.ShardName(k) + "/" + f.File, Problem: f.Problem})
		}
		ss.tally(&sum)
	}
	return sum, nil
}

// begunRecord names the record a begun upload would write on its 2xx.
func begunRecord(b record.BegunRequest, s *Snapshot) string {
	if b.Part {
		return record.PartName(b.FileDigest, len(s.PartsOf(b.FileDigest))+1)
	}
	return record.ReceiptNameRound(b.FileDigest, s.View(b.FileDigest, true).Round)
}

var (
	// ErrCorrupt: the run failed verification (a missing, unreadable, oversized, edited,
	// truncated, reordered or unexpected file, a broken chain, too many files): unresolved.
	ErrCorrupt = errors.New("journal: run failed verification")
	// ErrPending means pending-request.json already exists: another process is sending a
	// request (its worker holds the marker live), or an earlier one never finished (its
	// worker died). The run is unresolved.
	ErrPending = errors.New("journal: unfinished request pending")
)

// ShardWants are the plan digests of each shard's part of the root plan
// ("" each without plan.json): what its manifest must record.
func ShardWants(plan []string, n int) []string {
	out := make([]string, n)
	for k := 1; plan != nil && k <= n; k++ {
		out[k-1] = record.PlanDigestOf(record.ShardPlan(plan, k, n))
	}
	return out
}

// ScanShard scans shard k of rb once no run lies inside it. A shard that
// cannot be read (deleted, or not finished) is a snapshot of one finding.
func ScanShard(rb *store.Loc, k int, now time.Time) (s *Snapshot, unread string, err error) {
	b := rb.Shard(k)
	if err := b.Nested(); err != nil {
		return nil, "", err
	}
	if s, err = ScanRun(b, nil, now); err != nil {
		unread = "cannot read the shard: " + redact.Text(store.BareErr(err).Error())
		s = NewSnapshot()
		s.Findings.Add(".", "%s", unread)
	}
	return s, unread, nil
}

// ShardProblem says what makes shard snapshot s's manifest no shard of its
// root, which gives it plan digest want ("" for none); "" when nothing.
func ShardProblem(s *Snapshot, want string) string {
	switch {
	case s.Manifest != nil && s.Manifest.Parallel != 0:
		return "declares shards of its own (a root copied into a shard)"
	case want != "" && s.Manifest != nil && s.Manifest.PlanDigest != want:
		return "plan_digest is not this shard's part of the root plan (a shard of another run)"
	}
	return ""
}

// RootParallel is the shard count b's manifest declares (0: none, or unreadable).
func RootParallel(b *store.Loc) int {
	if data, _, ok := b.Read(nil, record.ManifestName, record.MaxRecordBytes); ok {
		if mi, err := record.ParseManifest(data); err == nil {
			return mi.Parallel
		}
	}
	return 0
}

// ShardReason names shard k in a reason: "shard-02/backoff-0003.json: …"
// for a reason that starts with a name of the shard, else "shard-02: …".
func ShardReason(k int, reason string) string {
	if name, _, ok := strings.Cut(reason, ":"); ok && (name == "." || record.IsJournalName(name) || strings.Contains(name, ".json")) {
		return record.ShardName(k) + "/" + reason
	}
	return record.ShardName(k) + ": " + reason
}

// RootOnly adds a finding for each journal name in a root but its manifest,
// plan and writes in progress: its records live in its shards.
func RootOnly(s *Snapshot) {
	for _, ln := range s.Listed {
		_, temp := record.ParseTempName(ln.Name)
		if !temp && ln.Name != record.ManifestName && ln.Name != record.PlanName && record.IsJournalName(ln.Name) {
			s.Findings.Add(ln.Name, "in a parallel run's root: its records live in its shards (not a record of this run)")
		}
	}
}
