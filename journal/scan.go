package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Finding is one problem of a run directory, found by [Verify] or by the
// verification [Open] performs. Any finding makes the run unresolved.
type Finding struct {
	// File is the file's name inside the run directory, or "." for the
	// directory itself.
	File string
	// Problem says what is wrong, in a few words.
	Problem string
}

// String returns "file: problem", the line `readrecovery journal verify`
// prints.
func (f Finding) String() string { return f.File + ": " + f.Problem }

// errNoRun is the error of a directory that is empty: it holds no run.
var errNoRun = errors.New("holds no run (no run.json)")

// entryRec is a verified backoff entry.
type entryRec struct {
	name string
	entryFile
}

// snapshot is the verified state of a run directory at one moment.
type snapshot struct {
	files    int
	manifest *manifestInfo // nil when run.json is missing or unusable
	entries  []entryRec    // entries that passed their own checks, in order
	receipts map[string]receiptFile
	// namedPrefixes holds the hex prefix of every receipt-*.json name, even
	// of receipts that fail verification: the file it names was attempted.
	namedPrefixes map[string]string
	pending       bool
	pendingFile   string // file digest named by a readable marker
	findings      []Finding
	// cache holds the parsed immutable files (manifest, entries, receipts)
	// by name, so that a refresh reads only new files.
	cache map[string]any
}

func (s *snapshot) addFinding(file, format string, args ...any) {
	s.findings = append(s.findings, Finding{File: file, Problem: fmt.Sprintf(format, args...)})
}

func (s *snapshot) lastDigest() string {
	if n := len(s.entries); n > 0 {
		return s.entries[n-1].EventDigest
	}
	if s.manifest != nil {
		return s.manifest.genesis
	}
	return ""
}

func (s *snapshot) planDigest() string {
	if s.manifest == nil {
		return ""
	}
	return s.manifest.planDigest
}

// allFindings are the findings plus the pending marker, as Verify lists them.
func (s *snapshot) allFindings() []Finding {
	out := append([]Finding(nil), s.findings...)
	if s.pending {
		out = append(out, Finding{File: markerName, Problem: pendingProblem})
	}
	return out
}

const pendingProblem = "unfinished request: its outcome is unknown (unresolved)"

// scan reads and verifies the run directory dir. prev, when not nil, is an
// earlier snapshot of the same directory whose immutable files need not be
// read again. An error means the directory itself cannot be read (missing,
// not a directory, unlistable, or empty: errNoRun); every problem inside it
// is a Finding.
func scan(fsy fsys.FS, dir string, prev *snapshot) (*snapshot, error) {
	info, err := fsy.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	des, err := fsy.ReadDir(dir, MaxFiles+1)
	if err != nil {
		return nil, err
	}
	if len(des) == 0 {
		return nil, errNoRun
	}
	s := &snapshot{
		files:         len(des),
		receipts:      map[string]receiptFile{},
		namedPrefixes: map[string]string{},
		cache:         map[string]any{},
	}
	if p := info.Mode().Perm(); p&0o077 != 0 {
		s.addFinding(".", "mode %04o, want 0700 (a private run directory)", p)
	}
	if len(des) > MaxFiles {
		// Fail closed without reading anything: the bound on work is the
		// bound on files.
		s.addFinding(".", "more than %d files (limit exceeded)", MaxFiles)
		return s, nil
	}
	var cache map[string]any
	if prev != nil {
		cache = prev.cache
	}
	sort.Slice(des, func(i, k int) bool { return des[i].Name() < des[k].Name() })

	// Findings about names come last, so that the first finding (the
	// reason of the status) is the most basic one: directory, manifest,
	// entries, receipts.
	var late []Finding
	var entryNames []string
	var receiptNames []string
	hasManifest := false
	for _, de := range des {
		name := de.Name()
		n, isEntry := parseEntryName(name)
		prefix, isReceipt := parseReceiptName(name)
		known := name == manifestName || name == markerName || isEntry || isReceipt
		if isReceipt {
			s.namedPrefixes[prefix] = name
		}
		switch {
		case name == markerName:
			s.pending = true // whatever it is, its presence counts
		case !known:
			late = append(late, Finding{name, "unexpected file in the run directory"})
		case !de.Type().IsRegular():
			// Never followed: a link could point anywhere.
			late = append(late, Finding{name, "not a regular file"})
		case name == manifestName:
			hasManifest = true
		case isEntry && (n < 1 || n > MaxEntries):
			late = append(late, Finding{name, fmt.Sprintf("entry number outside 0001..%04d (limit exceeded)", MaxEntries)})
		case isEntry:
			entryNames = append(entryNames, name)
		default:
			receiptNames = append(receiptNames, name)
		}
	}

	// The manifest.
	if !hasManifest {
		s.addFinding(manifestName, "missing run manifest")
	} else if c, ok := cache[manifestName].(manifestInfo); ok {
		s.manifest = &c
		s.cache[manifestName] = c
	} else if data, ok := readCapped(fsy, s, dir, manifestName, maxManifestBytes); ok {
		before := len(s.findings)
		if mi, err := parseManifest(data); err != nil {
			s.addFinding(manifestName, "%v", err)
		} else {
			s.manifest = &mi
			if len(s.findings) == before {
				s.cache[manifestName] = mi
			}
		}
	}

	// The entries: contiguous numbering, each self-verified, then the chain.
	prevDigest := s.lastDigest()
	prevName := manifestName
	legacy := s.manifest != nil && s.manifest.legacy
	for i, name := range entryNames {
		n, _ := parseEntryName(name)
		if n != i+1 {
			s.addFinding(name, "numbering not contiguous: %s is missing", entryName(i+1))
		}
		var ef entryFile
		if c, ok := cache[name].(entryFile); ok {
			ef = c
			s.cache[name] = ef
		} else {
			before := len(s.findings)
			data, ok := readCapped(fsy, s, dir, name, maxRecordBytes)
			if !ok {
				prevDigest, prevName = "", name
				continue
			}
			var err error
			if ef, err = parseEntry(data); err != nil {
				if legacy {
					s.addFinding(name, "legacy 429 without verifiable timing (%v)", err)
				} else {
					s.addFinding(name, "%v", err)
				}
				prevDigest, prevName = "", name
				continue
			}
			if len(s.findings) == before {
				s.cache[name] = ef // only a file without problems is trusted again
			}
		}
		if ef.Sequence != n {
			s.addFinding(name, "holds sequence %d (reordered or renamed)", ef.Sequence)
		}
		if s.manifest != nil && ef.PlanDigest != s.manifest.planDigest {
			s.addFinding(name, "plan_digest differs from run.json")
		}
		if prevDigest == "" || ef.PreviousDigest != prevDigest {
			s.addFinding(name, "chain broken: previous_digest does not match %s", prevName)
		}
		if why := untimed(ef.entryBody); why != "" {
			s.addFinding(name, "%s", why)
		}
		s.entries = append(s.entries, entryRec{name: name, entryFile: ef})
		prevDigest, prevName = ef.EventDigest, name
	}

	// The receipts: self-verified, named after their file, bound to the plan.
	for _, name := range receiptNames {
		var rf receiptFile
		cached := false
		before := len(s.findings)
		if c, ok := cache[name].(receiptFile); ok {
			rf, cached = c, true
		} else {
			data, ok := readCapped(fsy, s, dir, name, maxRecordBytes)
			if !ok {
				continue
			}
			var err error
			if rf, err = parseReceipt(data); err != nil {
				s.addFinding(name, "%v", err)
				continue
			}
		}
		if receiptName(rf.FileDigest) != name {
			s.addFinding(name, "file_digest does not match the file name (renamed)")
			continue
		}
		if s.manifest != nil && rf.PlanDigest != s.manifest.planDigest {
			s.addFinding(name, "plan_digest differs from run.json")
			continue
		}
		if cached || len(s.findings) == before {
			s.cache[name] = rf
		}
		s.receipts[rf.FileDigest] = rf
	}

	// The pending marker: its presence is the finding; its content, when
	// readable, names the file for the planner.
	if s.pending {
		if data, ok := readCapped(fsy, nil, dir, markerName, maxRecordBytes); ok {
			if m, ok := parseMarker(data); ok {
				s.pendingFile = m.FileDigest
			}
		}
	}
	s.findings = append(s.findings, late...)
	return s, nil
}

// readCapped reads dir/name after checking, on the open file, that it is a
// regular file of at most limit bytes and private (0600). Problems become
// findings on s (when s is not nil) and ok is false.
func readCapped(fsy fsys.FS, s *snapshot, dir, name string, limit int64) (data []byte, ok bool) {
	bad := func(format string, args ...any) ([]byte, bool) {
		if s != nil {
			s.addFinding(name, format, args...)
		}
		return nil, false
	}
	f, err := fsy.OpenFile(filepath.Join(dir, name), os.O_RDONLY, 0)
	if err != nil {
		return bad("unreadable: %v", bareErr(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return bad("unreadable: %v", err)
	}
	if !info.Mode().IsRegular() {
		return bad("not a regular file")
	}
	if info.Size() > limit {
		return bad("%d bytes, over the %d-byte cap", info.Size(), limit)
	}
	if info.Size() == 0 {
		return bad("empty (truncated)")
	}
	if p := info.Mode().Perm(); p&0o077 != 0 && s != nil {
		s.addFinding(name, "mode %04o, want 0600 (private)", p)
	}
	// Read exactly the size Stat reported (at most limit): one read call.
	// A file that grew since is cut short and fails its canonical check.
	data = make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return bad("unreadable: %v", err)
	}
	return data, true
}

// Verify checks the run directory dir without changing it and returns every
// finding, one per problem: the directory's mode and file count (at most
// [MaxFiles]); unexpected, non-regular, oversized or non-private files; the
// manifest (version, canonical form, digest); the entries (numbering
// backoff-0001.json onwards without gaps, at most [MaxEntries], canonical
// form, event digest, sequence, plan digest, the chain of previous digests,
// a usable timing); the receipts (digest, name, plan); and a pending marker
// (an unfinished request). No findings means the run can never be
// unresolved except by clock regression, which depends on the time of the
// question (see [Journal.Status]).
//
// The error is non-nil only when dir itself cannot be read: it does not
// exist (errors.Is(err, fs.ErrNotExist)), is not a directory, cannot be
// listed, or is empty (no run).
func Verify(dir string) ([]Finding, error) {
	s, err := scan(fsys.OS{}, dir, nil)
	if err != nil {
		return nil, dirError(dir, err)
	}
	return s.allFindings(), nil
}

// bareErr drops the path of a *fs.PathError (the finding names the file).
func bareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func dirError(dir string, err error) error {
	if errors.Is(err, errNoRun) {
		return fmt.Errorf("journal: %s %w: %w", dir, errNoRun, fs.ErrNotExist)
	}
	return fmt.Errorf("journal: %w", err)
}
