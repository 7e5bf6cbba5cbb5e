package runread

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// Loaded is a record that passed the loader: its envelope and body.
type Loaded struct {
	record.Env
	Body any
}

// Rec is a record the run holds: its name, envelope and typed body.
type Rec struct {
	Name string
	Loaded
}

func (r *Rec) Entry() *record.EntryBody     { b, _ := r.Body.(*record.EntryBody); return b }
func (r *Rec) receipt() *record.ReceiptBody { b, _ := r.Body.(*record.ReceiptBody); return b }
func (r *Rec) Review() *record.ReviewBody   { b, _ := r.Body.(*record.ReviewBody); return b }

// NamedFile is the planned file a record names ("" for none); a pending
// review's is its marker's, unless the marker was a review's.
func NamedFile(r *Rec) (d string, pending bool) {
	switch b := r.Body.(type) {
	case *record.EntryBody:
		return b.Provenance.FileDigest, false
	case *record.ReceiptBody:
		return b.FileDigest, false
	case *record.PartBody:
		return b.FileDigest, false
	case *record.ReviewBody:
		if m := b.Marker; m != nil && m.Method != record.ReviewMethod {
			return m.FileDigest, true
		}
		return b.FileDigest, false
	}
	return "", false
}

// Add appends a record to the run's records and to its file's.
func (s *Snapshot) Add(r Rec) {
	p := &r
	s.Recs = append(s.Recs, p)
	if d, _ := NamedFile(p); d != "" {
		s.byFile[d] = append(slices.Clip(s.byFile[d]), p) // never into an extended snapshot's (extend)
	}
}

// Wrote adds the record r this Journal wrote, as a scan would find it.
func (s *Snapshot) Wrote(r Rec) {
	s.Seq[r.Seq], s.LastSeq = r, max(s.LastSeq, r.Seq)
	s.Cache[r.Name] = r.Loaded
	s.Files++
	s.Add(r)
	if k, _ := record.KindOf(r.Name); k != nil && s.kinds != nil {
		i, _ := slices.BinarySearch(s.kinds[k], r.Name)
		s.kinds[k] = slices.Insert(slices.Clip(s.kinds[k]), i, r.Name)
	}
}

// ofKind returns the records of body type B, of the file d ("" for every file), in order.
func ofKind[B any](s *Snapshot, d string) []*Rec {
	list := s.Recs
	if d != "" {
		list = s.byFile[d]
	}
	var out []*Rec
	for _, r := range list {
		if _, ok := r.Body.(*B); ok {
			out = append(out, r)
		}
	}
	return out
}

func (s *Snapshot) Entries() []*Rec         { return ofKind[record.EntryBody](s, "") }
func (s *Snapshot) Reviews() []*Rec         { return ofKind[record.ReviewBody](s, "") }
func (s *Snapshot) PartsOf(d string) []*Rec { return ofKind[record.PartBody](s, d) }

// receiptOf returns the commit receipt of file d's round, or nil.
func (s *Snapshot) receiptOf(d string, round int) *Rec {
	for _, r := range s.byFile[d] {
		if b := r.receipt(); b != nil && max(b.Round, 1) == round {
			return r
		}
	}
	return nil
}

// tally adds the records the run holds, by kind, to sum.
func (s *Snapshot) tally(sum *Summary) {
	sum.Entries += len(s.Entries())
	sum.Receipts += len(ofKind[record.ReceiptBody](s, ""))
	sum.Parts += len(ofKind[record.PartBody](s, ""))
	sum.Reviews += len(s.Reviews())
}

// loader loads the immutable files of one scan, from the previous scan's cache when it has them.
type loader struct {
	s     *Snapshot
	b     *store.Loc
	cache map[string]any
}

// load returns the cached parse of an immutable file, or reads and parses
// it; note, when not "", formats a parse error. A file whose read or parse
// raised a finding is not cached.
func (ld *loader) load(name string, note string) (any, bool) {
	s := ld.s
	if c, ok := ld.cache[name]; ok {
		s.Cache[name] = c
		s.register(name, c)
		return c, true
	}
	k, _ := record.KindOf(name)
	probe, before := store.Findings{}, len(s.Findings) // the read adds only findings
	data, _, read := ld.b.Read(&probe, name, cmp.Or(k.MaxBytes, record.MaxRecordBytes))
	if !read && k.Kind == record.KindHead && (s.Pending || replacedHead(ld.b, name)) {
		// A write in progress (the marker) replaces the head, or another
		// worker's finished since the listing: the next scan checks the
		// newer head. A head gone with none newer is a deletion.
		return nil, false
	}
	s.Findings = append(s.Findings, probe...)
	var v any
	var err error
	switch {
	case !read:
	case name == record.ManifestName:
		v, err = record.ParseManifest(data)
	case name == record.PlanName:
		files, d, perr := record.ParsePlanList(data)
		v, err = PlanList{files, d}, perr
	default:
		e, kind, body, perr := record.Unseal(data)
		switch {
		case perr != nil:
			err = perr
		case kind != k.Kind || record.NameOf(e.Seq, body) != name:
			err = fmt.Errorf("its content names %s (renamed)", store.EscapeName(record.NameOf(e.Seq, body)))
		}
		v = Loaded{e, body}
	}
	if err != nil {
		s.Findings.Add(name, cmp.Or(note, "%v"), err)
	}
	if !read || err != nil {
		if k.Record() {
			s.broken++
		}
		return nil, false
	}
	if len(s.Findings) == before {
		s.Cache[name] = v
	}
	s.register(name, v)
	return v, true
}

// check verifies the listed files by kind in the table's order, each against the kinds
// before it, then what needs the reviews, and the run's sequence with its head.
func (s *Snapshot) check(byKind map[*record.FileKind][]string, ld *loader) {
	s.kinds = byKind
	if len(byKind[record.FileKinds[0]]) == 0 {
		s.Findings.Add(record.ManifestName, "missing run manifest")
	} else if v, ok := ld.load(record.ManifestName, ""); ok {
		mi := v.(record.ManifestInfo)
		s.Manifest = &mi
	}
	if len(byKind[record.FileKinds[1]]) > 0 {
		if v, ok := ld.load(record.PlanName, ""); ok && s.Manifest != nil {
			if pl := v.(PlanList); pl.Digest != s.Manifest.PlanDigest {
				s.Findings.Add(record.PlanName, "does not match plan_digest of run.json (edited)")
			} else {
				s.PlanFiles = pl.Files
			}
		}
	}
	for _, k := range record.FileKinds[2:6] {
		note := ""
		if k.Kind == record.KindEntry && s.Manifest != nil && s.Manifest.Legacy {
			note = "legacy 429 without verifiable timing (%v)"
		}
		for i, name := range byKind[k] {
			s.checkRecord(k, i, name, note, ld)
		}
	}
	// An entry without timing needs its restriction review.
	for _, r := range s.Recs {
		if e := r.Entry(); e != nil && record.Untimed(*e) != "" && !s.Bounded(r.Name) {
			s.Findings.Add(r.Name, "%s", record.Untimed(*e))
		}
	}
	// A receipt of a round after the first needs the reupload review that
	// opened the round, and every receipt a planned file.
	receipts := ofKind[record.ReceiptBody](s, "")
	slices.SortFunc(receipts, func(a, b *Rec) int {
		x, y := a.receipt(), b.receipt()
		return cmp.Or(strings.Compare(x.FileDigest, y.FileDigest), x.Round-y.Round)
	})
	for _, r := range receipts {
		s.checkReceipt(r)
	}
	s.checkHeads(byKind[record.FileKinds[6]], ld, slices.Sorted(maps.Keys(s.Seq)))
	// The records in the run's order (in a run that verifies, each kind's names' order).
	slices.SortStableFunc(s.Recs, bySeq)
	for _, l := range s.byFile {
		slices.SortStableFunc(l, bySeq)
	}
}

func bySeq(a, b *Rec) int { return a.Seq - b.Seq }

// checkRecord loads and admits the i-th listed record of kind k, name.
func (s *Snapshot) checkRecord(k *record.FileKind, i int, name, note string, ld *loader) {
	_, n, hex := record.ParseName(name)
	if k.MaxN > 0 && n != i+1 { // entries and reviews: from 0001 without gaps
		s.Findings.Add(name, "numbering not contiguous: %s%04d.json is missing", k.Prefix, i+1)
	}
	v, ok := ld.load(name, note)
	if !(ok && s.admit(Rec{name, v.(Loaded)}, n)) && k.Attempted {
		s.badFiles[hex] = name // its file was attempted
	}
}

// checkReceipt checks a receipt's round and file.
func (s *Snapshot) checkReceipt(r *Rec) {
	d, round := r.receipt().FileDigest, max(r.receipt().Round, 1)
	switch {
	case round > s.View(d, true).Round:
		s.Findings.Add(r.Name, "round %d without the reupload review that opens it", round)
	case !s.InPlan(d):
		s.Findings.Add(r.Name, "names a file outside plan.json")
	default:
		return
	}
	s.badFiles[record.FileHex(d)] = r.Name
}

// extend is check for a listing that adds only receipts and part receipts to
// the one prev checked clean and without reviews (an upload's records, as a
// worker's refresh finds them): prev's records stand as they were (records
// are immutable, and these kinds judge only those before them), only the new
// ones are read and checked, so a refresh costs what is new, not the run
// (R112). Anything else, or any finding, reports false and leaves s as it
// was: check reads the run whole.
func (s *Snapshot) extend(prev *Snapshot, byKind map[*record.FileKind][]string, b *store.Loc) bool {
	if prev == nil || prev.Light || s.Light || prev.Manifest == nil || len(prev.Findings)+prev.broken+len(prev.badFiles) > 0 ||
		len(prev.kinds[record.FileKinds[5]]) > 0 { // a review judges every receipt, later ones too
		return false
	}
	t := *s
	t.Manifest, t.PlanFiles, t.LastSeq, t.kinds = prev.Manifest, prev.PlanFiles, prev.LastSeq, byKind
	t.Recs, t.byFile, t.Seq, t.Cache = slices.Clip(prev.Recs), maps.Clone(prev.byFile), maps.Clone(prev.Seq), maps.Clone(prev.Cache)
	t.badFiles, t.Findings = map[string]string{}, slices.Clip(s.Findings) // s's stay as they were
	for _, h := range prev.Heads {
		delete(t.Cache, h) // a head is read again: the one that counts may have changed
	}
	ld := &loader{s: &t, b: b, cache: prev.Cache}
	for i, k := range record.FileKinds[:6] {
		added, ok := addedNames(prev.kinds[k], byKind[k])
		switch {
		case !ok || len(added) > 0 && (i < 2 || k.MaxN > 0): // a deletion, or new entries or reviews
			return false
		}
		for _, name := range added {
			t.checkRecord(k, 0, name, "", ld)
		}
	}
	var seqs []int
	for _, r := range t.Recs[len(prev.Recs):] {
		if r.receipt() != nil {
			t.checkReceipt(r)
		}
		if t.Seq[r.Seq].Name == r.Name {
			seqs = append(seqs, r.Seq)
		}
	}
	slices.Sort(seqs)
	t.checkHeads(byKind[record.FileKinds[6]], ld, seqs)
	if len(t.Findings) > len(s.Findings) || t.broken > 0 || len(t.badFiles) > 0 {
		return false
	}
	slices.SortStableFunc(t.Recs[len(prev.Recs):], bySeq)
	for _, r := range t.Recs[len(prev.Recs):] {
		d, _ := NamedFile(r)
		slices.SortStableFunc(t.byFile[d], bySeq)
	}
	*s = t
	Extended.Add(1)
	return true
}

// Extended counts the scans extend made (tests).
var Extended atomic.Uint64

// addedNames are the names of now (sorted) that old (sorted) lacks; false
// when a name of old is missing from now.
func addedNames(old, now []string) ([]string, bool) {
	var added []string
	for _, n := range now {
		if len(old) > 0 && old[0] == n {
			old = old[1:]
		} else {
			added = append(added, n)
		}
	}
	return added, len(old) == 0
}

// admit applies the rule of a loaded record's kind against the records before
// it, and adds it to the run's records when it holds; a review whose evidence
// does not hold (reviewProblem) never takes a file out of unknown.
func (s *Snapshot) admit(r Rec, n int) bool {
	switch b := r.Body.(type) {
	case *record.EntryBody:
		s.otherPlan(r.Name, b.PlanDigest)
	case *record.ReceiptBody:
		if s.otherPlan(r.Name, b.PlanDigest) {
			return false
		}
	case *record.PartBody:
		prior := len(s.PartsOf(b.FileDigest))
		switch {
		case n != prior+1:
			s.Findings.Add(r.Name, "numbering not contiguous: %s is missing", record.PartName(b.FileDigest, prior+1))
			return false
		case s.otherPlan(r.Name, b.PlanDigest):
			return false
		case !s.InPlan(b.FileDigest):
			s.Findings.Add(r.Name, "names a file outside plan.json")
			return false
		}
	case *record.ReviewBody:
		s.otherPlan(r.Name, b.PlanDigest)
		if why := s.reviewProblem(*b); why != "" {
			s.Findings.Add(r.Name, "%s", why)
			return false
		}
	}
	s.Add(r)
	return true
}

// otherPlan reports (as a finding) a record bound to another plan.
func (s *Snapshot) otherPlan(name, planDigest string) bool {
	if s.Manifest != nil && planDigest != s.Manifest.PlanDigest {
		s.Findings.Add(name, "plan_digest differs from run.json")
		return true
	}
	return false
}

// checkHeads finds what the run's sequence says is missing (deletion-detected):
// a record the next one names, the record the head names, the head of the last
// record, or the marker of an upload begun (R85).
func (s *Snapshot) checkHeads(names []string, ld *loader, seqs []int) {
	if s.Light {
		return // no sequence: the light scan reads no receipt or head
	}
	s.Heads, s.Begun = names, nil
	before := len(s.Findings)
	defer func() { s.seqBroken = len(s.Findings) > before }()
	// at checks that p names record k (run.json for 0), as by says.
	at := func(k int, p record.Link, by string) {
		r, ok := s.Seq[k]
		switch {
		case k == 0 && s.Manifest != nil && (p.Name != record.ManifestName || p.Digest != s.Manifest.Genesis):
			s.Findings.Add(by, "prev does not match run.json (from another run)")
		case k == 0:
		case !ok && !slices.ContainsFunc(s.Listed, func(de store.ListedName) bool { return de.Name == p.Name }):
			s.Findings.Add(p.Name, "missing: record %d of the run, named by %s (deleted)", k, by)
		case !ok: // present but failing its own checks: that is its finding
		case r.Name != p.Name || r.Digest != p.Digest:
			s.Findings.Add(by, "prev does not match %s, record %d (replaced, reordered or edited)", r.Name, k)
		}
	}
	for _, k := range seqs { // every record's, or extend's new ones
		at(k-1, s.Seq[k].Prev, s.Seq[k].Name)
	}
	h := s.LastHead()
	n := s.LastSeq
	switch {
	case h == 0 && n == 0:
		return
	case s.Pending && h == n-1:
		return // its writer is between record and head (at work, or crashed: its marker says so)
	case h < n:
		s.Findings.Add(record.HeadName(n), "missing: the head naming the last record %s (deleted)", s.Seq[n].Name)
		return
	}
	v, ok := ld.load(record.HeadName(h), "")
	if !ok {
		return // its own finding, unless a write replaced it meanwhile
	}
	hd := v.(Loaded)
	begun := hd.Body.(*record.HeadBody).Begun
	switch {
	case begun == nil && s.Pending && h == n+1:
		return // a listing taken during a write saw the head, not yet its record
	case begun != nil && h == n+1: // an upload begun: its record is still to come
		s.Begun = &BegunHead{Name: record.HeadName(h), Env: hd.Env, Req: *begun}
		if !s.Pending && s.broken == 0 { // else a record failing its checks may be the one
			s.Findings.Add(record.MarkerName, "missing: the upload begun in %s has neither its marker nor its record (%s, or a backoff entry): the marker was removed by hand or the record deleted, so its outcome is unknown: unresolved until `journal review --pending`", record.HeadName(h), begunRecord(*begun, s))
		}
	}
	if begun != nil {
		h--
	}
	at(h, hd.Prev, record.HeadName(hd.Seq))
}

// replacedHead reports whether the head name, listed but unreadable, is gone from a fresh
// listing that holds a newer head: another worker's write replaced it since the listing.
func replacedHead(b *store.Loc, name string) bool {
	k, ok := record.ParseHeadName(name)
	if !ok {
		return false
	}
	names, _, err := b.List()
	if err != nil {
		return false
	}
	newer := false
	for _, n := range names {
		if n.Name == name {
			return false // still there: its read failed for another reason
		}
		if h, ok := record.ParseHeadName(n.Name); ok && h > k {
			newer = true
		}
	}
	return newer
}

// EntryNamed returns the backoff entry named name, or nil.
func (s *Snapshot) EntryNamed(name string) *Rec {
	es := s.Entries()
	if i := slices.IndexFunc(es, func(e *Rec) bool { return e.Name == name }); i >= 0 {
		return es[i]
	}
	return nil
}

// LastHead is the number of the highest head listed (0: none).
func (s *Snapshot) LastHead() (h int) {
	for _, n := range s.Heads {
		k, _ := record.ParseHeadName(n)
		h = max(h, k)
	}
	return h
}

// Evidence is what a review of file d sees now; for d "" (a pending
// review), the run's entries only.
func (s *Snapshot) Evidence(d string) record.ReviewEvidence {
	var ev record.ReviewEvidence
	if es := s.Entries(); len(es) > 0 {
		ev.Entries, ev.LastEventDigest = len(es), es[len(es)-1].Digest
	}
	if d == "" {
		return ev
	}
	if ps := s.PartsOf(d); len(ps) > 0 {
		ev.Parts, ev.LastPartDigest = len(ps), ps[len(ps)-1].Digest
	}
	if r := s.receiptOf(d, s.View(d, true).Round); r != nil {
		ev.ReceiptDigest = r.Digest
	}
	return ev
}

// reviewProblem checks a review against the records before it: the
// evidence it names exists, and it shows the file unknown (never acked,
// never without a record of its round). "" means the review holds.
func (s *Snapshot) reviewProblem(r record.ReviewBody) string {
	ev := r.Evidence
	d := r.FileDigest
	if r.Marker != nil {
		d = r.Marker.FileDigest
	}
	if d != "" && !s.InPlan(d) {
		return "names a file outside plan.json"
	}
	entries, reviews := s.Entries(), s.Reviews()
	if ev.Entries > len(entries) || ev.Entries > 0 && entries[ev.Entries-1].Digest != ev.LastEventDigest {
		return "evidence names backoff entries that are not on disk (edited)"
	}
	for _, p := range reviews {
		if ev.Entries < p.Review().Evidence.Entries {
			return "evidence is older than the review before it (reordered)"
		}
	}
	if r.Marker != nil {
		return "" // a pending review needs no record of the file: the marker was the only one
	}
	if rs := r.Restriction; rs != nil {
		i := slices.IndexFunc(entries, func(e *Rec) bool { return e.Name == rs.Entry && e.Digest == rs.EventDigest })
		switch {
		case i < 0:
			return "names an entry that is not on disk (" + rs.Entry + ")"
		case record.Untimed(*entries[i].Entry()) == "":
			return "bounds " + rs.Entry + ", which has its own timing"
		}
		for _, p := range reviews {
			if prs := p.Review().Restriction; prs != nil && prs.EventDigest == rs.EventDigest {
				return "bounds " + rs.Entry + " again (" + p.Name + " did)"
			}
		}
		return ""
	}
	if s.Light {
		return "" // a decision about a file restricts nothing: not checked by a light scan
	}
	v := s.View(d, true) // its round and last review, each older than ev (checked above)
	if v.pending != nil && v.Receipt == nil {
		return "" // a pending review made the file unknown
	}
	ps := s.PartsOf(d)
	if ev.Parts > len(ps) || ev.Parts > 0 && ps[ev.Parts-1].Digest != ev.LastPartDigest {
		return "evidence names part receipts that are not on disk (edited)"
	}
	round, mark := v.Round, v.mark
	if ev.Parts < mark.Parts {
		return "evidence is older than the file's review before it (reordered)"
	}
	rc := s.receiptOf(d, round)
	switch {
	case rc != nil && rc.receipt().ACK:
		return "reviews an acked file (a review never applies to an ACK)"
	case rc != nil && rc.Digest != ev.ReceiptDigest:
		return "evidence does not name the receipt of the reviewed round"
	case rc == nil && ev.ReceiptDigest != "":
		return "evidence names a receipt that is not on disk"
	case rc != nil, ev.Parts > mark.Parts:
		return ""
	}
	for _, e := range entries[mark.Entries:ev.Entries] {
		if e.Entry().Provenance.FileDigest == d {
			return ""
		}
	}
	return "reviews a file that was not unknown (no record of its round)"
}

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

// Classify is the class of the file with digest d (see [FileState]), its review's decision
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
	Round   int                   // 1 plus the file's reupload reviews
	review  *Rec                  // the file's last review, or nil
	mark    record.ReviewEvidence // that review's evidence
	Receipt *Rec                  // its round's commit receipt not covered by that review
	Bad     string                // a receipt or part receipt of the file that fails verification
	record  string                // the first record of the round naming the file, as a reason; "" when none
	pending *Rec                  // a pending review since the last decision: in flight under a dead marker
}

func (s *Snapshot) View(d string, ignorePending bool) fileView {
	v := fileView{Round: 1, Bad: s.badFiles[record.FileHex(d)]}
	var pending *Rec
	for _, r := range s.byFile[d] {
		switch rv := r.Review(); {
		case rv == nil:
		case rv.Marker != nil:
			pending = r
		default:
			v.review, v.mark, pending = r, rv.Evidence, nil
			if rv.Decision == record.DecisionReupload {
				v.Round++
			}
		}
	}
	// A skip review keeps the round: the receipt it saw is covered by it.
	if r := s.receiptOf(d, v.Round); r != nil && (v.review == nil || r.Digest != v.mark.ReceiptDigest) {
		v.Receipt = r
	}
	for _, r := range s.byFile[d] {
		if e := r.Entry(); e != nil && e.Sequence > v.mark.Entries {
			v.record = fmt.Sprintf("%s: its upload met %d, no ACK on record", r.Name, e.Status)
			return v
		}
	}
	if ps := s.PartsOf(d); len(ps) > v.mark.Parts {
		p := ps[v.mark.Parts]
		v.record = fmt.Sprintf("%s: a part of its upload (status %d) but no committed ACK", p.Name, p.Body.(*record.PartBody).Status)
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
