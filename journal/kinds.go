package journal

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// loaded is a record that passed the loader: its envelope and body.
type loaded struct {
	record.Env
	body any
}

// rec is a record the run holds: its name, envelope and typed body.
type rec struct {
	name string
	loaded
}

func (r *rec) entry() *record.EntryBody     { b, _ := r.body.(*record.EntryBody); return b }
func (r *rec) receipt() *record.ReceiptBody { b, _ := r.body.(*record.ReceiptBody); return b }
func (r *rec) part() *record.PartBody       { b, _ := r.body.(*record.PartBody); return b }
func (r *rec) review() *record.ReviewBody   { b, _ := r.body.(*record.ReviewBody); return b }

// namedFile is the planned file a record names ("" for none); a pending
// review's is its marker's, unless the marker was a review's.
func namedFile(r *rec) (d string, pending bool) {
	switch b := r.body.(type) {
	case *record.EntryBody:
		return b.Provenance.FileDigest, false
	case *record.ReceiptBody:
		return b.FileDigest, false
	case *record.PartBody:
		return b.FileDigest, false
	case *record.ReviewBody:
		if m := b.Marker; m != nil && m.Method != reviewMethod {
			return m.FileDigest, true
		}
		return b.FileDigest, false
	}
	return "", false
}

// add appends a record to the run's records and to its file's.
func (s *snapshot) add(r rec) {
	p := &r
	s.recs = append(s.recs, p)
	if d, _ := namedFile(p); d != "" {
		s.byFile[d] = append(s.byFile[d], p)
	}
}

// ofKind returns the records of body type B, of the file d ("" for every file), in order.
func ofKind[B any](s *snapshot, d string) []*rec {
	list := s.recs
	if d != "" {
		list = s.byFile[d]
	}
	var out []*rec
	for _, r := range list {
		if _, ok := r.body.(*B); ok {
			out = append(out, r)
		}
	}
	return out
}

func (s *snapshot) entries() []*rec         { return ofKind[record.EntryBody](s, "") }
func (s *snapshot) reviews() []*rec         { return ofKind[record.ReviewBody](s, "") }
func (s *snapshot) partsOf(d string) []*rec { return ofKind[record.PartBody](s, d) }

// receiptOf returns the commit receipt of file d's round, or nil.
func (s *snapshot) receiptOf(d string, round int) *rec {
	for _, r := range s.byFile[d] {
		if b := r.receipt(); b != nil && max(b.Round, 1) == round {
			return r
		}
	}
	return nil
}

// tally adds the records the run holds, by kind, to sum.
func (s *snapshot) tally(sum *Summary) {
	sum.Entries += len(s.entries())
	sum.Receipts += len(ofKind[record.ReceiptBody](s, ""))
	sum.Parts += len(ofKind[record.PartBody](s, ""))
	sum.Reviews += len(s.reviews())
}

// loader loads the immutable files of one scan, from the previous scan's cache when it has them.
type loader struct {
	s     *snapshot
	b     *store.Loc
	cache map[string]any
}

// load returns the cached parse of an immutable file, or reads and parses
// it; note, when not "", formats a parse error. A file whose read or parse
// raised a finding is not cached.
func (ld *loader) load(name string, note string) (any, bool) {
	s := ld.s
	if c, ok := ld.cache[name]; ok {
		s.cache[name] = c
		s.register(name, c)
		return c, true
	}
	k, _ := record.KindOf(name)
	probe, before := store.Findings{}, len(s.findings) // the read adds only findings
	data, _, read := ld.b.Read(&probe, name, cmp.Or(k.MaxBytes, record.MaxRecordBytes))
	if !read && k.Kind == record.KindHead && (s.pending || replacedHead(ld.b, name)) {
		// A write in progress (the marker) replaces the head, or another
		// worker's finished since the listing: the next scan checks the
		// newer head. A head gone with none newer is a deletion.
		return nil, false
	}
	s.findings = append(s.findings, probe...)
	var v any
	var err error
	switch {
	case !read:
	case name == record.ManifestName:
		v, err = record.ParseManifest(data)
	case name == record.PlanName:
		files, d, perr := record.ParsePlanList(data)
		v, err = planList{files, d}, perr
	default:
		e, kind, body, perr := record.Unseal(data)
		switch {
		case perr != nil:
			err = perr
		case kind != k.Kind || record.NameOf(e.Seq, body) != name:
			err = fmt.Errorf("its content names %s (renamed)", store.EscapeName(record.NameOf(e.Seq, body)))
		}
		v = loaded{e, body}
	}
	if err != nil {
		s.addFinding(name, cmp.Or(note, "%v"), err)
	}
	if !read || err != nil {
		if k.Record() {
			s.broken++
		}
		return nil, false
	}
	if len(s.findings) == before {
		s.cache[name] = v
	}
	s.register(name, v)
	return v, true
}

// check verifies the listed files by kind in the table's order, each against the kinds
// before it, then what needs the reviews, and the run's sequence with its head.
func (s *snapshot) check(byKind map[*record.FileKind][]string, ld *loader) {
	if len(byKind[record.FileKinds[0]]) == 0 {
		s.addFinding(record.ManifestName, "missing run manifest")
	} else if v, ok := ld.load(record.ManifestName, ""); ok {
		mi := v.(record.ManifestInfo)
		s.manifest = &mi
	}
	if len(byKind[record.FileKinds[1]]) > 0 {
		if v, ok := ld.load(record.PlanName, ""); ok && s.manifest != nil {
			if pl := v.(planList); pl.digest != s.manifest.PlanDigest {
				s.addFinding(record.PlanName, "does not match plan_digest of run.json (edited)")
			} else {
				s.planFiles = pl.files
			}
		}
	}
	for _, k := range record.FileKinds[2:6] {
		note := ""
		if k.Kind == record.KindEntry && s.manifest != nil && s.manifest.Legacy {
			note = "legacy 429 without verifiable timing (%v)"
		}
		for i, name := range byKind[k] {
			_, n, hex := record.ParseName(name)
			if k.MaxN > 0 && n != i+1 { // entries and reviews: from 0001 without gaps
				s.addFinding(name, "numbering not contiguous: %s%04d.json is missing", k.Prefix, i+1)
			}
			v, ok := ld.load(name, note)
			if !(ok && s.admit(rec{name, v.(loaded)}, n)) && k.Attempted != nil {
				s.badFiles[hex] = name // its file was attempted
			}
		}
	}
	// An entry without timing needs its restriction review.
	for _, r := range s.recs {
		if e := r.entry(); e != nil && record.Untimed(*e) != "" && !s.bounded(r.name) {
			s.addFinding(r.name, "%s", record.Untimed(*e))
		}
	}
	// A receipt of a round after the first needs the reupload review that
	// opened the round, and every receipt a planned file.
	receipts := ofKind[record.ReceiptBody](s, "")
	slices.SortFunc(receipts, func(a, b *rec) int {
		x, y := a.receipt(), b.receipt()
		return cmp.Or(strings.Compare(x.FileDigest, y.FileDigest), x.Round-y.Round)
	})
	for _, r := range receipts {
		d, round := r.receipt().FileDigest, max(r.receipt().Round, 1)
		switch {
		case round > s.view(d, true).round:
			s.addFinding(r.name, "round %d without the reupload review that opens it", round)
		case !s.inPlan(d):
			s.addFinding(r.name, "names a file outside plan.json")
		default:
			continue
		}
		s.badFiles[record.FileHex(d)] = r.name
	}
	s.checkHeads(byKind[record.FileKinds[6]], ld)
	// The records in the run's order (in a run that verifies, each kind's names' order).
	bySeq := func(a, b *rec) int { return a.Seq - b.Seq }
	slices.SortStableFunc(s.recs, bySeq)
	for _, l := range s.byFile {
		slices.SortStableFunc(l, bySeq)
	}
}

// admit applies the rule of a loaded record's kind against the records before
// it, and adds it to the run's records when it holds; a review whose evidence
// does not hold (reviewProblem) never takes a file out of unknown.
func (s *snapshot) admit(r rec, n int) bool {
	switch b := r.body.(type) {
	case *record.EntryBody:
		s.otherPlan(r.name, b.PlanDigest)
	case *record.ReceiptBody:
		if s.otherPlan(r.name, b.PlanDigest) {
			return false
		}
	case *record.PartBody:
		prior := len(s.partsOf(b.FileDigest))
		switch {
		case n != prior+1:
			s.addFinding(r.name, "numbering not contiguous: %s is missing", record.PartName(b.FileDigest, prior+1))
			return false
		case s.otherPlan(r.name, b.PlanDigest):
			return false
		case !s.inPlan(b.FileDigest):
			s.addFinding(r.name, "names a file outside plan.json")
			return false
		}
	case *record.ReviewBody:
		s.otherPlan(r.name, b.PlanDigest)
		if why := s.reviewProblem(*b); why != "" {
			s.addFinding(r.name, "%s", why)
			return false
		}
	}
	s.add(r)
	return true
}

// otherPlan reports (as a finding) a record bound to another plan.
func (s *snapshot) otherPlan(name, planDigest string) bool {
	if s.manifest != nil && planDigest != s.manifest.PlanDigest {
		s.addFinding(name, "plan_digest differs from run.json")
		return true
	}
	return false
}

// checkHeads finds what the run's sequence says is missing (deletion-detected):
// a record the next one names, the record the head names, the head of the last
// record, or the marker of an upload begun (R85).
func (s *snapshot) checkHeads(names []string, ld *loader) {
	if s.light {
		return // no sequence: the light scan reads no receipt or head
	}
	s.heads, s.begun = names, nil
	before := len(s.findings)
	defer func() { s.seqBroken = len(s.findings) > before }()
	// at checks that p names record k (run.json for 0), as by says.
	at := func(k int, p record.Link, by string) {
		r, ok := s.seq[k]
		switch {
		case k == 0 && s.manifest != nil && (p.Name != record.ManifestName || p.Digest != s.manifest.Genesis):
			s.addFinding(by, "prev does not match run.json (from another run)")
		case k == 0:
		case !ok && !slices.ContainsFunc(s.listed, func(de store.ListedName) bool { return de.Name == p.Name }):
			s.addFinding(p.Name, "missing: record %d of the run, named by %s (deleted)", k, by)
		case !ok: // present but failing its own checks: that is its finding
		case r.name != p.Name || r.Digest != p.Digest:
			s.addFinding(by, "prev does not match %s, record %d (replaced, reordered or edited)", r.name, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.seq)) {
		at(k-1, s.seq[k].Prev, s.seq[k].name)
	}
	h := s.lastHead()
	n := s.lastSeq
	switch {
	case h == 0 && n == 0:
		return
	case s.pending && h == n-1:
		return // its writer is between record and head (at work, or crashed: its marker says so)
	case h < n:
		s.addFinding(record.HeadName(n), "missing: the head naming the last record %s (deleted)", s.seq[n].name)
		return
	}
	v, ok := ld.load(record.HeadName(h), "")
	if !ok {
		return // its own finding, unless a write replaced it meanwhile
	}
	hd := v.(loaded)
	begun := hd.body.(*record.HeadBody).Begun
	switch {
	case begun == nil && s.pending && h == n+1:
		return // a listing taken during a write saw the head, not yet its record
	case begun != nil && h == n+1: // an upload begun: its record is still to come
		s.begun = &begunHead{name: record.HeadName(h), Env: hd.Env, req: *begun}
		if !s.pending && s.broken == 0 { // else a record failing its checks may be the one
			s.addFinding(record.MarkerName, "missing: the upload begun in %s has neither its marker nor its record (%s, or a backoff entry): the marker was removed by hand or the record deleted, so its outcome is unknown: unresolved until `journal review --pending`", record.HeadName(h), begunRecord(*begun, s))
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

// numberProblem is the finding of a numbered name beyond its kind's limit.
func numberProblem(k *record.FileKind) string {
	return fmt.Sprintf("number outside 0001..%04d (limit exceeded)", k.MaxN)
}

// entryNamed returns the backoff entry named name, or nil.
func (s *snapshot) entryNamed(name string) *rec {
	for _, e := range s.entries() {
		if e.name == name {
			return e
		}
	}
	return nil
}

// lastHead is the number of the highest head listed (0: none).
func (s *snapshot) lastHead() (h int) {
	for _, n := range s.heads {
		k, _ := record.ParseHeadName(n)
		h = max(h, k)
	}
	return h
}
