package journal

import (
	"fmt"
	"maps"
	"slices"
)

// fileKind is the one description of a kind of file a run holds: its name,
// what it proves, its limits, and how the scan adds its files to the
// snapshot once each passed its loader (run.json and plan.json their own,
// every record the one loader, unseal). The scan, Inspect, isJournalName
// and the run's sequence all read the table fileKinds.
type fileKind struct {
	// kind is the envelope's kind; "" for run.json and plan.json, whose
	// name is prefix.
	kind, prefix string
	// what says what a file of the kind is and what it proves.
	what string
	// maxN bounds the number of a numbered kind (0: not numbered).
	maxN     int
	maxBytes int64
	// attempted returns the hex prefix of the file whose attempt a file
	// of the kind records, so that one failing verification leaves its
	// file unknown; nil when the kind names no file.
	attempted func(name string) string
	// check adds the files of the kind (names sorted) to the snapshot,
	// against the kinds before it in the table.
	check func(s *snapshot, names []string, ld *loader)
}

// record reports whether the kind's files are records of the run's
// sequence (a head is not one: it names the last).
func (k *fileKind) record() bool { return k.kind != "" && k.kind != kindHead }

func hexOf(name string) string { _, _, h := parseName(name); return h }

// fileKinds is the table, in the order of the scan. (Set in init: the
// checks refer back to the table through the names they parse.)
var fileKinds []*fileKind

func init() {
	fileKinds = []*fileKind{
		{prefix: manifestName, maxBytes: maxManifestBytes, check: checkManifest,
			what: "run.json, the run manifest: the format version, the plan's digest, the creation time; the genesis of the run's sequence"},
		{prefix: planName, maxBytes: maxPlanBytes, check: checkPlan,
			what: "plan.json, the plan's sorted file digests: which files the run may send"},
		{kind: kindEntry, prefix: "backoff-", maxN: maxEntries, maxBytes: maxRecordBytes, check: checkEntries,
			what: "backoff-NNNN.json, a 429 of a journaled request: the server's restriction, its timing and the request it answered"},
		{kind: kindReceipt, prefix: "receipt-", maxBytes: maxRecordBytes, attempted: hexOf, check: checkReceipts,
			what: "receipt-<hex>[-rNN].json, a commit's outcome: the file's ACK (never sent again) or its attempt without one (unknown)"},
		{kind: kindPart, prefix: "part-", maxBytes: maxRecordBytes, attempted: hexOf, check: checkParts,
			what: "part-<hex>-NNNN.json, a part's outcome: never the file's ACK; a file with parts and no ACK is unknown"},
		{kind: kindReview, prefix: "review-", maxN: maxReviews, maxBytes: maxRecordBytes, check: checkReviews,
			what: "review-NNNN.json, an operator's decision about an unknown file, the resolution of an abandoned request, or a restriction's bound"},
		{kind: kindHead, prefix: "head-", maxN: maxRunSeq, maxBytes: maxRecordBytes, check: checkHeads,
			what: "head-NNNN.json, the run's head: names the last record, or the upload begun that writes it (R85)"},
	}
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

// isRecordName reports whether name is a record of the run's sequence: a
// backoff entry, a commit receipt, a part receipt or a review.
func isRecordName(name string) bool {
	k, _ := kindOf(name)
	return k != nil && k.record()
}

// loaded is a record that passed the loader: its envelope and body.
type loaded struct {
	env
	body any
}

// loader loads the immutable files of one scan, from the previous scan's
// cache when it has them.
type loader struct {
	s     *snapshot
	b     *loc
	cache map[string]any
}

// load returns the cached parse of an immutable file, or reads and parses
// it; a file is cached only when it raised no finding. note, when not "",
// formats a parse error.
func (ld *loader) load(name string, note string) (any, bool) {
	s := ld.s
	k, _ := kindOf(name)
	if c, ok := ld.cache[name]; ok {
		s.cache[name] = c
		s.register(name, c)
		return c, true
	}
	before := len(s.findings)
	data, _, ok := ld.b.read(s, name, k.maxBytes)
	if !ok {
		s.broken += boolInt(k.record())
		return nil, false
	}
	return ld.parsed(name, data, note, before)
}

// parsed is load of the bytes data read from name; before is the count of
// findings before the read (a file whose read raised one is not cached).
func (ld *loader) parsed(name string, data []byte, note string, before int) (any, bool) {
	s := ld.s
	k, _ := kindOf(name)
	var v any
	var err error
	switch name {
	case manifestName:
		v, err = parseManifest(data)
	case planName:
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
		if note == "" {
			note = "%v"
		}
		s.addFinding(name, note, err)
		s.broken += boolInt(k.record())
		return nil, false
	}
	if len(s.findings) == before {
		s.cache[name] = v
	}
	s.register(name, v)
	return v, true
}

func checkManifest(s *snapshot, names []string, ld *loader) {
	if len(names) == 0 {
		s.addFinding(manifestName, "missing run manifest")
		return
	}
	if v, ok := ld.load(manifestName, ""); ok {
		mi := v.(manifestInfo)
		s.manifest = &mi
	}
}

// checkPlan: plan.json matches the manifest.
func checkPlan(s *snapshot, names []string, ld *loader) {
	if len(names) == 0 {
		return
	}
	v, ok := ld.load(planName, "")
	if !ok {
		return
	}
	pl := v.(planList)
	switch {
	case s.manifest == nil:
	case pl.digest != s.manifest.planDigest:
		s.addFinding(planName, "does not match plan_digest of run.json (edited)")
	default:
		s.planFiles = pl.files
	}
}

// otherPlan reports (as a finding) a record bound to another plan.
func (s *snapshot) otherPlan(name, planDigest string) bool {
	if s.manifest != nil && planDigest != s.manifest.planDigest {
		s.addFinding(name, "plan_digest differs from run.json")
		return true
	}
	return false
}

// checkEntries: numbered from 0001 without gaps.
func checkEntries(s *snapshot, names []string, ld *loader) {
	legacyNote := ""
	if s.manifest != nil && s.manifest.legacy {
		legacyNote = "legacy 429 without verifiable timing (%v)"
	}
	for i, name := range names {
		if _, n, _ := parseName(name); n != i+1 {
			s.addFinding(name, "numbering not contiguous: %s is missing", entryName(i+1))
		}
		v, ok := ld.load(name, legacyNote)
		if !ok {
			continue
		}
		r := v.(loaded)
		e := entryRec{name: name, env: r.env, entryBody: *r.body.(*entryBody)}
		s.otherPlan(name, e.PlanDigest)
		if untimed(e.entryBody) != "" {
			// A finding unless a restriction review bounds it (checked
			// with the reviews).
			s.untimed = append(s.untimed, name)
		}
		s.entries = append(s.entries, e)
	}
}

// checkReceipts: bound to the plan; a receipt that fails marks its file
// attempted.
func checkReceipts(s *snapshot, names []string, ld *loader) {
	for _, name := range names {
		_, round, prefix := parseName(name)
		v, ok := ld.load(name, "")
		if !ok {
			s.badFiles[prefix] = name
			continue
		}
		r := v.(loaded)
		rf := receiptFile{env: r.env, receiptBody: *r.body.(*receiptBody)}
		if s.otherPlan(name, rf.PlanDigest) {
			s.badFiles[prefix] = name
			continue
		}
		if s.receipts[rf.FileDigest] == nil {
			s.receipts[rf.FileDigest] = map[int]receiptFile{}
		}
		s.receipts[rf.FileDigest][round] = rf
	}
}

// checkParts: per file, numbered from 0001 without gaps, in the plan.
func checkParts(s *snapshot, names []string, ld *loader) {
	for _, name := range names {
		_, n, prefix := parseName(name)
		v, ok := ld.load(name, "")
		if !ok {
			s.badFiles[prefix] = name
			continue
		}
		r := v.(loaded)
		p := partRec{name: name, env: r.env, partBody: *r.body.(*partBody)}
		prior := s.parts[p.FileDigest]
		switch {
		case n != len(prior)+1:
			s.addFinding(name, "numbering not contiguous: %s is missing", partName(p.FileDigest, len(prior)+1))
		case s.otherPlan(name, p.PlanDigest):
		case !s.inPlan(p.FileDigest):
			s.addFinding(name, "names a file outside plan.json")
		default:
			s.parts[p.FileDigest] = append(prior, p)
			continue
		}
		s.badFiles[prefix] = name
	}
}

// checkReviews: contiguous, each about a file that its evidence shows was
// unknown; then an entry without timing needs its restriction review, a
// commit receipt of a round after the first the reupload review that
// opened the round, and every receipt a planned file.
func checkReviews(s *snapshot, names []string, ld *loader) {
	for i, name := range names {
		if _, n, _ := parseName(name); n != i+1 {
			s.addFinding(name, "numbering not contiguous: %s is missing", reviewName(i+1))
		}
		v, ok := ld.load(name, "")
		if !ok {
			continue
		}
		r := v.(loaded)
		rv := reviewRec{name: name, env: r.env, reviewBody: *r.body.(*reviewBody)}
		s.otherPlan(name, rv.PlanDigest)
		if why := s.reviewProblem(rv.reviewBody); why != "" {
			s.addFinding(name, "%s", why)
			continue // a review that does not hold never takes a file out of unknown
		}
		s.reviews = append(s.reviews, rv)
	}
	for _, name := range s.untimed {
		if !s.bounded(name) {
			for _, e := range s.entries {
				if e.name == name {
					s.addFinding(name, "%s", untimed(e.entryBody))
				}
			}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(s.receipts)) {
		reuploads := 0
		for _, r := range s.reviews {
			if r.FileDigest == d && r.Decision == DecisionReupload {
				reuploads++
			}
		}
		for _, round := range slices.Sorted(maps.Keys(s.receipts[d])) {
			name := receiptNameRound(d, round)
			switch {
			case round > 1+reuploads:
				s.addFinding(name, "round %d without the reupload review that opens it", round)
			case !s.inPlan(d):
				s.addFinding(name, "names a file outside plan.json")
			default:
				continue
			}
			s.badFiles[fileHex(d)] = name
		}
	}
}

// checkHeads: the run's sequence, with its head (deletion-detected).
func checkHeads(s *snapshot, names []string, ld *loader) {
	if s.light {
		return // no sequence: the light scan reads no receipt or head
	}
	s.heads = names
	listed := make(map[string]bool, len(s.listed))
	for _, de := range s.listed {
		listed[de.name] = true
	}
	before := len(s.findings)
	s.checkSequence(listed, func(name string) (loaded, bool) {
		if _, cached := ld.cache[name]; !cached {
			// Read once: the problems of the read are the head's findings
			// unless the head was replaced meanwhile.
			probe := newSnapshot()
			data, _, ok := ld.b.read(probe, name, maxRecordBytes)
			if !ok && (s.pending || replacedHead(ld.b, name)) {
				// A write in progress (the marker) replaces the head, or
				// another worker's write finished since the listing and a
				// newer head replaced this one: no finding; the next scan
				// checks the newer head. A head gone with none newer is a
				// deletion.
				return loaded{}, false
			}
			before := len(s.findings)
			s.findings = append(s.findings, probe.findings...)
			if !ok {
				return loaded{}, false
			}
			v, ok := ld.parsed(name, data, "", before)
			if !ok {
				return loaded{}, false
			}
			return v.(loaded), true
		}
		v, ok := ld.load(name, "")
		if !ok {
			return loaded{}, false
		}
		return v.(loaded), true
	})
	s.seqBroken = len(s.findings) > before
}

// replacedHead reports whether the head name, listed but unreadable, is
// gone from a fresh listing that holds a newer head: another worker's write
// replaced it after the listing was taken.
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

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
