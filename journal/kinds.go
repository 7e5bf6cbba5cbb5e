package journal

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// fileKind is the one description of a kind of file a run holds (docs/policy.md:
// "The run's files"): the scan, Inspect, isJournalName and the run's sequence read it.
type fileKind struct {
	kind, prefix string // the envelope's kind; "" for run.json and plan.json, named prefix
	maxN         int    // the bound of a numbered kind's number (0: not numbered)
	maxBytes     int64  // the size cap (0: maxRecordBytes)
	// attempted returns the hex prefix of the file whose attempt a file of the kind records,
	// so that one failing verification leaves its file unknown; nil when it names no file.
	attempted func(name string) string
	body      func() any // an empty body of a record kind (unseal)
}

// record reports whether the kind's files are records of the run's sequence (not a head).
func (k *fileKind) record() bool { return k.kind != "" && k.kind != kindHead }

// fileKinds is the table, in the order of the scan: each kind is checked
// against the kinds before it. (Set in init: attempted parses names through it.)
var fileKinds []*fileKind

func init() {
	fileKinds = []*fileKind{
		{prefix: manifestName, maxBytes: maxManifestBytes},
		{prefix: planName, maxBytes: maxPlanBytes},
		{kind: kindEntry, prefix: "backoff-", maxN: maxEntries, body: newBody[entryBody]},
		{kind: kindReceipt, prefix: "receipt-", attempted: hexOf, body: newBody[receiptBody]},
		{kind: kindPart, prefix: "part-", attempted: hexOf, body: newBody[partBody]},
		{kind: kindReview, prefix: "review-", maxN: maxReviews, body: newBody[reviewBody]},
		{kind: kindHead, prefix: "head-", maxN: maxRunSeq, body: newBody[headBody]},
	}
}

func newBody[B any]() any { return new(B) }

func hexOf(name string) string {
	_, _, h := parseName(name)
	return h
}

// kindOf returns the kind of a name and its number, or nil.
func kindOf(name string) (*fileKind, int) {
	for _, k := range fileKinds[:2] {
		if name == k.prefix {
			return k, 0
		}
	}
	k, n, _ := parseName(name)
	return k, n
}

// isRecordName reports whether name is a record of the run's sequence.
func isRecordName(name string) bool {
	k, _ := kindOf(name)
	return k != nil && k.record()
}

// loaded is a record that passed the loader: its envelope and body.
type loaded struct {
	env
	body any
}

// rec is a record the run holds: its name, envelope and typed body.
type rec struct {
	name string
	loaded
}

func (r *rec) entry() *entryBody     { b, _ := r.body.(*entryBody); return b }
func (r *rec) receipt() *receiptBody { b, _ := r.body.(*receiptBody); return b }
func (r *rec) part() *partBody       { b, _ := r.body.(*partBody); return b }
func (r *rec) review() *reviewBody   { b, _ := r.body.(*reviewBody); return b }

// namedFile is the planned file a record names ("" for none); a pending
// review's is its marker's, unless the marker was a review's.
func namedFile(r *rec) (d string, pending bool) {
	switch b := r.body.(type) {
	case *entryBody:
		return b.Provenance.FileDigest, false
	case *receiptBody:
		return b.FileDigest, false
	case *partBody:
		return b.FileDigest, false
	case *reviewBody:
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

func (s *snapshot) entries() []*rec         { return ofKind[entryBody](s, "") }
func (s *snapshot) reviews() []*rec         { return ofKind[reviewBody](s, "") }
func (s *snapshot) partsOf(d string) []*rec { return ofKind[partBody](s, d) }

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
	sum.Receipts += len(ofKind[receiptBody](s, ""))
	sum.Parts += len(ofKind[partBody](s, ""))
	sum.Reviews += len(s.reviews())
}

// loader loads the immutable files of one scan, from the previous scan's cache when it has them.
type loader struct {
	s     *snapshot
	b     *loc
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
	k, _ := kindOf(name)
	probe, before := &snapshot{}, len(s.findings) // the read adds only findings
	data, _, read := ld.b.read(probe, name, cmp.Or(k.maxBytes, maxRecordBytes))
	if !read && k.kind == kindHead && (s.pending || replacedHead(ld.b, name)) {
		// A write in progress (the marker) replaces the head, or another
		// worker's finished since the listing: the next scan checks the
		// newer head. A head gone with none newer is a deletion.
		return nil, false
	}
	s.findings = append(s.findings, probe.findings...)
	var v any
	var err error
	switch {
	case !read:
	case name == manifestName:
		v, err = parseManifest(data)
	case name == planName:
		files, d, perr := parsePlanList(data)
		v, err = planList{files, d}, perr
	default:
		e, kind, body, perr := unseal(data)
		switch {
		case perr != nil:
			err = perr
		case kind != k.kind || nameOf(e.Seq, body) != name:
			err = fmt.Errorf("its content names %s (renamed)", escapeName(nameOf(e.Seq, body)))
		}
		v = loaded{e, body}
	}
	if err != nil {
		s.addFinding(name, cmp.Or(note, "%v"), err)
	}
	if !read || err != nil {
		if k.record() {
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
func (s *snapshot) check(byKind map[*fileKind][]string, ld *loader) {
	if len(byKind[fileKinds[0]]) == 0 {
		s.addFinding(manifestName, "missing run manifest")
	} else if v, ok := ld.load(manifestName, ""); ok {
		mi := v.(manifestInfo)
		s.manifest = &mi
	}
	if len(byKind[fileKinds[1]]) > 0 {
		if v, ok := ld.load(planName, ""); ok && s.manifest != nil {
			if pl := v.(planList); pl.digest != s.manifest.planDigest {
				s.addFinding(planName, "does not match plan_digest of run.json (edited)")
			} else {
				s.planFiles = pl.files
			}
		}
	}
	for _, k := range fileKinds[2:6] {
		note := ""
		if k.kind == kindEntry && s.manifest != nil && s.manifest.legacy {
			note = "legacy 429 without verifiable timing (%v)"
		}
		for i, name := range byKind[k] {
			_, n, hex := parseName(name)
			if k.maxN > 0 && n != i+1 { // entries and reviews: from 0001 without gaps
				s.addFinding(name, "numbering not contiguous: %s%04d.json is missing", k.prefix, i+1)
			}
			v, ok := ld.load(name, note)
			if !(ok && s.admit(rec{name, v.(loaded)}, n)) && k.attempted != nil {
				s.badFiles[hex] = name // its file was attempted
			}
		}
	}
	// An entry without timing needs its restriction review.
	for _, r := range s.recs {
		if e := r.entry(); e != nil && untimed(*e) != "" && !s.bounded(r.name) {
			s.addFinding(r.name, "%s", untimed(*e))
		}
	}
	// A receipt of a round after the first needs the reupload review that
	// opened the round, and every receipt a planned file.
	receipts := ofKind[receiptBody](s, "")
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
		s.badFiles[fileHex(d)] = r.name
	}
	s.checkHeads(byKind[fileKinds[6]], ld)
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
	case *entryBody:
		s.otherPlan(r.name, b.PlanDigest)
	case *receiptBody:
		if s.otherPlan(r.name, b.PlanDigest) {
			return false
		}
	case *partBody:
		prior := len(s.partsOf(b.FileDigest))
		switch {
		case n != prior+1:
			s.addFinding(r.name, "numbering not contiguous: %s is missing", partName(b.FileDigest, prior+1))
			return false
		case s.otherPlan(r.name, b.PlanDigest):
			return false
		case !s.inPlan(b.FileDigest):
			s.addFinding(r.name, "names a file outside plan.json")
			return false
		}
	case *reviewBody:
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
	if s.manifest != nil && planDigest != s.manifest.planDigest {
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
	at := func(k int, p link, by string) {
		r, ok := s.seq[k]
		switch {
		case k == 0 && s.manifest != nil && (p.Name != manifestName || p.Digest != s.manifest.genesis):
			s.addFinding(by, "prev does not match run.json (from another run)")
		case k == 0:
		case !ok && !slices.ContainsFunc(s.listed, func(de listedName) bool { return de.name == p.Name }):
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
		s.addFinding(headName(n), "missing: the head naming the last record %s (deleted)", s.seq[n].name)
		return
	}
	v, ok := ld.load(headName(h), "")
	if !ok {
		return // its own finding, unless a write replaced it meanwhile
	}
	hd := v.(loaded)
	begun := hd.body.(*headBody).Begun
	switch {
	case begun == nil && s.pending && h == n+1:
		return // a listing taken during a write saw the head, not yet its record
	case begun != nil && h == n+1: // an upload begun: its record is still to come
		s.begun = &begunHead{name: headName(h), env: hd.env, req: *begun}
		if !s.pending && s.broken == 0 { // else a record failing its checks may be the one
			s.addFinding(markerName, "missing: the upload begun in %s has neither its marker nor its record (%s, or a backoff entry): the marker was removed by hand or the record deleted, so its outcome is unknown: unresolved until `journal review --pending`", headName(h), begunRecord(*begun, s))
		}
	}
	if begun != nil {
		h--
	}
	at(h, hd.Prev, headName(hd.Seq))
}

// replacedHead reports whether the head name, listed but unreadable, is gone from a fresh
// listing that holds a newer head: another worker's write replaced it since the listing.
func replacedHead(b *loc, name string) bool {
	k, ok := parseHeadName(name)
	if !ok {
		return false
	}
	names, _, err := b.list()
	if err != nil {
		return false
	}
	newer := false
	for _, n := range names {
		if n.name == name {
			return false // still there: its read failed for another reason
		}
		if h, ok := parseHeadName(n.name); ok && h > k {
			newer = true
		}
	}
	return newer
}

// numberProblem is the finding of a numbered name beyond its kind's limit.
func numberProblem(k *fileKind) string {
	return fmt.Sprintf("number outside 0001..%04d (limit exceeded)", k.maxN)
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
		k, _ := parseHeadName(n)
		h = max(h, k)
	}
	return h
}
