package journal

import (
	"fmt"
	"maps"
	"slices"
)

// fileKind is the one description of a kind of file a run holds: its name
// pattern, its loader (format, canonical form and own digest, checked on
// the bytes alone), how it is checked against the files around it, and
// what it proves. The scan, Verify and Inspect, isJournalName and the
// run's sequence (deletion-detected) all read this table: adding a kind is
// adding an entry here and its writer.
type fileKind struct {
	// what says what a file of the kind is and what it proves.
	what string
	// match parses a name of the kind; n is its number (0 when the kind
	// is not numbered).
	match func(name string) (n int, ok bool)
	// maxN bounds the number of a numbered kind (0: not numbered).
	maxN int
	// maxBytes is the size cap checked before reading.
	maxBytes int64
	// parse is the loader: it refuses any file that is not the canonical
	// encoding of a valid record of the kind.
	parse func(data []byte) (any, error)
	// record: a record of the run's one sequence (its "run" link).
	record bool
	// attempted returns the hex prefix of the file whose attempt a file
	// of the kind records, so that one failing verification leaves its
	// file unknown; nil when the kind names no file.
	attempted func(name string) string
	// check verifies the files of the kind that passed their own loader
	// against the files before them in the table, and adds them to the
	// snapshot; names are sorted.
	check func(s *snapshot, names []string, ld *loader)
}

func (k *fileKind) numbered() bool { return k.maxN > 0 }

func exact(want string) func(string) (int, bool) {
	return func(name string) (int, bool) { return 0, name == want }
}

// fileKinds is the table, in the order of the scan: each kind is checked
// against the kinds before it. (Set in init: the loaders refer back to
// the table through the names they check.)
var fileKinds []*fileKind

func init() { fileKinds = kindTable() }

func kindTable() []*fileKind {
	return []*fileKind{
		{
			what:     "run.json, the run manifest: the format version, the plan's digest, the creation time; the genesis of the run's chain",
			match:    exact(manifestName),
			maxBytes: maxManifestBytes,
			parse:    func(b []byte) (any, error) { return parseManifest(b) },
			check:    checkManifest,
		},
		{
			what:     "plan.json, the plan's sorted file digests: which files the run may send",
			match:    exact(planName),
			maxBytes: maxPlanBytes,
			parse: func(b []byte) (any, error) {
				files, d, err := parsePlanList(b)
				return planList{files, d}, err
			},
			check: checkPlan,
		},
		{
			what:     "backoff-NNNN.json, a 429 of a journaled request: the server's restriction, its timing and the request it answered",
			match:    parseEntryName,
			maxN:     maxEntries,
			maxBytes: maxRecordBytes,
			parse:    func(b []byte) (any, error) { return parseEntry(b) },
			record:   true,
			check:    checkEntries,
		},
		{
			what:     "receipt-<hex>[-rNN].json, a commit's outcome: the file's ACK (never sent again) or its attempt without one (unknown)",
			match:    func(name string) (int, bool) { _, r, ok := parseReceiptName(name); return r, ok },
			maxBytes: maxRecordBytes,
			parse:    func(b []byte) (any, error) { return parseReceipt(b) },
			record:   true,
			attempted: func(name string) string {
				h, _, _ := parseReceiptName(name)
				return h
			},
			check: checkReceipts,
		},
		{
			what:     "part-<hex>-NNNN.json, a part's outcome: never the file's ACK; a file with parts and no ACK is unknown",
			match:    func(name string) (int, bool) { _, n, ok := parsePartName(name); return n, ok },
			maxBytes: maxRecordBytes,
			parse:    func(b []byte) (any, error) { return parsePart(b) },
			record:   true,
			attempted: func(name string) string {
				h, _, _ := parsePartName(name)
				return h
			},
			check: checkParts,
		},
		{
			what:     "review-NNNN.json, an operator's decision about an unknown file, or the resolution of an abandoned marker",
			match:    parseReviewName,
			maxN:     maxReviews,
			maxBytes: maxRecordBytes,
			parse:    func(b []byte) (any, error) { return parseReview(b) },
			record:   true,
			check:    checkReviews,
		},
		{
			what:     "head-NNNN.json, the run's head: names the last record, so that deleting it is seen",
			match:    parseHeadName,
			maxN:     maxRunSeq,
			maxBytes: maxRecordBytes,
			parse:    func(b []byte) (any, error) { return parseHead(b) },
			check:    checkHeads,
		},
	}
}

// kindOf returns the kind of a name and its number, or nil.
func kindOf(name string) (*fileKind, int) {
	for _, k := range fileKinds {
		if n, ok := k.match(name); ok {
			return k, n
		}
	}
	return nil, 0
}

// isRecordName reports whether name is a record of the run's sequence: a
// backoff entry, a commit receipt, a part receipt or a review.
func isRecordName(name string) bool {
	k, _ := kindOf(name)
	return k != nil && k.record
}

// loader loads the immutable files of one scan, from the previous scan's
// cache when it has them.
type loader struct {
	s     *snapshot
	b     *loc
	cache map[string]any
}

// load returns the cached parse of an immutable file, or reads and parses
// it with its kind's loader; a file is cached only when it raised no
// finding. note, when not "", formats a parse error.
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
		return nil, false
	}
	return ld.parsed(name, data, note, before)
}

// parsed is load of the bytes data read from name; before is the count of
// findings before the read (a file whose read raised one is not cached).
func (ld *loader) parsed(name string, data []byte, note string, before int) (any, bool) {
	s := ld.s
	k, _ := kindOf(name)
	v, err := k.parse(data)
	if err != nil {
		if note != "" {
			s.addFinding(name, note, err)
		} else {
			s.addFinding(name, "%v", err)
		}
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

// checkPlan: plan.json (runs written since it exists) matches the manifest.
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

// checkEntries: contiguous numbering and sequence, each self-verified
// (the run's one chain and head detect deletion, edits and reordering).
func checkEntries(s *snapshot, names []string, ld *loader) {
	legacyNote := ""
	if s.manifest != nil && s.manifest.legacy {
		legacyNote = "legacy 429 without verifiable timing (%v)"
	}
	for i, name := range names {
		n, _ := parseEntryName(name)
		if n != i+1 {
			s.addFinding(name, "numbering not contiguous: %s is missing", entryName(i+1))
		}
		v, ok := ld.load(name, legacyNote)
		if !ok {
			continue
		}
		ef := v.(entryFile)
		if ef.Sequence != n {
			s.addFinding(name, "holds sequence %d (reordered or renamed)", ef.Sequence)
		}
		if s.manifest != nil && ef.PlanDigest != s.manifest.planDigest {
			s.addFinding(name, "plan_digest differs from run.json")
		}
		if untimed(ef.entryBody) != "" {
			// A finding unless a restriction review bounds it (checked
			// with the reviews).
			s.untimed = append(s.untimed, name)
		}
		s.entries = append(s.entries, entryRec{name: name, entryFile: ef})
	}
}

// checkReceipts: self-verified, named after their file and round, bound
// to the plan.
func checkReceipts(s *snapshot, names []string, ld *loader) {
	for _, name := range names {
		prefix, round, _ := parseReceiptName(name)
		v, ok := ld.load(name, "")
		if !ok {
			s.badFiles[prefix] = name
			continue
		}
		rf := v.(receiptFile)
		if want := receiptNameRound(rf.FileDigest, max(rf.Round, 1)); want != name || rf.Round == 1 {
			s.addFinding(name, "file_digest or round does not match the file name (renamed)")
			s.badFiles[prefix] = name
			continue
		}
		if s.manifest != nil && rf.PlanDigest != s.manifest.planDigest {
			s.addFinding(name, "plan_digest differs from run.json")
			s.badFiles[prefix] = name
			continue
		}
		if s.receipts[rf.FileDigest] == nil {
			s.receipts[rf.FileDigest] = map[int]receiptFile{}
		}
		s.receipts[rf.FileDigest][round] = rf
	}
}

// checkParts: per file, numbered from 0001 without gaps, self-verified,
// bound to the plan.
func checkParts(s *snapshot, names []string, ld *loader) {
	for _, name := range names {
		prefix, n, _ := parsePartName(name)
		v, ok := ld.load(name, "")
		if !ok {
			s.badFiles[prefix] = name
			continue
		}
		pf := v.(partFile)
		prior := s.parts[pf.FileDigest]
		switch {
		case fileHex(pf.FileDigest) != prefix || pf.Part != n:
			s.addFinding(name, "file_digest or part number does not match the file name (renamed)")
		case n != len(prior)+1:
			s.addFinding(name, "numbering not contiguous: %s is missing", partName(pf.FileDigest, len(prior)+1))
		case s.manifest != nil && pf.PlanDigest != s.manifest.planDigest:
			s.addFinding(name, "plan_digest differs from run.json")
		case !s.inPlan(pf.FileDigest):
			s.addFinding(name, "names a file outside plan.json")
		default:
			s.parts[pf.FileDigest] = append(prior, partRec{name: name, partFile: pf})
			continue
		}
		s.badFiles[prefix] = name
	}
}

// checkReviews: contiguous, each about a file that its evidence
// shows was unknown; then a commit receipt of a round after the first
// needs the reupload review that opened the round, and every receipt
// names a planned file.
func checkReviews(s *snapshot, names []string, ld *loader) {
	for i, name := range names {
		n, _ := parseReviewName(name)
		if n != i+1 {
			s.addFinding(name, "numbering not contiguous: %s is missing", reviewName(i+1))
		}
		v, ok := ld.load(name, "")
		if !ok {
			continue
		}
		rv := v.(reviewFile)
		if rv.Sequence != n {
			s.addFinding(name, "holds sequence %d (reordered or renamed)", rv.Sequence)
		}
		if s.manifest != nil && rv.PlanDigest != s.manifest.planDigest {
			s.addFinding(name, "plan_digest differs from run.json")
		}
		if why := s.reviewProblem(rv.reviewBody); why != "" {
			s.addFinding(name, "%s", why)
			continue // a review that does not hold never takes a file out of unknown
		}
		s.reviews = append(s.reviews, reviewRec{name: name, reviewFile: rv})
	}
	// An entry without timing is unresolved until a restriction review
	// bounds it.
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
		rounds := s.receipts[d]
		reuploads := 0
		for _, r := range s.reviews {
			if r.FileDigest == d && r.Decision == DecisionReupload {
				reuploads++
			}
		}
		for _, round := range slices.Sorted(maps.Keys(rounds)) {
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
	s.checkSequence(listed, func(name string) (headFile, bool) {
		if _, cached := ld.cache[name]; !cached {
			// Read once: the problems of the read are the head's findings
			// unless the head was replaced meanwhile.
			probe := newSnapshot()
			data, _, ok := ld.b.read(probe, name, maxRecordBytes)
			if !ok && (s.pending || replacedHead(ld.b, name)) {
				// A write in progress (the marker) replaces the head, or
				// another worker's write finished since the listing and a
				// newer head replaced this one: the listing is older than
				// the run. That is no finding; the next scan checks the
				// newer head. A head gone with none newer is a deletion.
				return headFile{}, false
			}
			before := len(s.findings)
			s.findings = append(s.findings, probe.findings...)
			if !ok {
				return headFile{}, false
			}
			v, ok := ld.parsed(name, data, "", before)
			if !ok {
				return headFile{}, false
			}
			return v.(headFile), true
		}
		v, ok := ld.load(name, "")
		if !ok {
			return headFile{}, false
		}
		return v.(headFile), true
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
