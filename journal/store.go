package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Store is where a run's records live (shared-runs): a flat set of named,
// immutable objects plus the one pending marker; formats, digests, the chain
// and the limits are the journal's. [DirStore] is the local directory;
// github.com/readrecovery/readrecovery/azure/blobjournal keeps runs in Azure
// Blob Storage. A Store must not retry a write in a way that could store an
// object twice, nor send through the transport of the run it records: a
// failure is a persistence failure, never a wait.
//
// The journal finds two optional methods by a type assertion:
//
//	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
//	EnclosingRun(ctx context.Context) (string, error)
//
// ListPrefix lists only the whole names that start with prefix: a parallel
// run's shards ([WithParallel]) live under shard-01/ … shard-NN/ of their
// root's Store, each listed by ListPrefix, else by List of the root,
// filtered. EnclosingRun returns the name of the run this one lies inside
// (Blob: a prefix under one holding a run.json), or "" when none;
// [OpenStore] refuses such a run (runs never nest).
type Store interface {
	// Create stores data under name only if no object of that name exists
	// (O_EXCL; Blob: If-None-Match: *), durably before it returns, and
	// returns its version (an ETag; "" without versions). When name exists
	// it changes nothing and errors.Is(err, fs.ErrExist) holds.
	Create(ctx context.Context, name string, data []byte) (version string, err error)
	// Read returns name's content and version, reading at most limit+1
	// bytes so that a larger object shows as such without being read whole.
	// A missing name: errors.Is(err, fs.ErrNotExist).
	Read(ctx context.Context, name string, limit int64) (data []byte, version string, err error)
	// List returns the names of at most limit objects of the run, in any
	// order; an empty run gives none and no error.
	List(ctx context.Context, limit int) ([]string, error)
	// Remove deletes name only while its version is still version (Blob:
	// If-Match; ignored without versions). The journal removes only the
	// pending marker and a head a newer head replaced.
	Remove(ctx context.Context, name, version string) error
	// Hold keeps the marker name this process just created (version from
	// Create) live, as Live tells every process, until release, however long
	// its request and whatever any clock says (marker-liveness); a dead
	// process's hold ends by the store's own means (the kernel's lock, the
	// service's lease). The journal releases after the marker's removal; a
	// failed Hold is a persistence failure (the marker is removed again, nothing is sent).
	Hold(ctx context.Context, name, version string) (release func(), err error)
	// Live reports whether a process holds name now, and its version (""
	// without versions). A marker is live from its Create on (a store whose
	// hold begins at Hold counts the moments between as live by its own
	// means). A missing name: errors.Is(err, fs.ErrNotExist); any other error
	// means the store cannot tell (no locks): the marker counts as live.
	Live(ctx context.Context, name string) (live bool, version string, err error)
}

// liveness is what the store tells of a marker's worker (R83).
type liveness int

const (
	holdNone    liveness = iota // no lock or lease: its worker died, or the marker was made by hand
	holdLive                    // its worker holds it: a request in flight
	holdUnknown                 // the store cannot tell (no locks): counts as live (deadMarker)
	holdGone                    // removed since the listing
)

const (
	// storeTimeout bounds each Store request: lists and reads are bounded
	// by the caller's context too (R85), writes only by this (wctx).
	storeTimeout = 30 * time.Second
	// pendingPoll is how often [WithPendingWait] looks again for another
	// worker's marker to go.
	pendingPoll = 25 * time.Millisecond
	// deadPoll (plus up to as much again) is how often [Journal.Next] reads the run
	// again while it waits for a dead worker's upload's review (dead-upload-waits).
	deadPoll = 500 * time.Millisecond
)

// prefixLister and enclosing are a Store with one of its optional methods.
type prefixLister interface {
	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
}
type enclosing interface {
	EnclosingRun(ctx context.Context) (string, error)
}

// errNested: a run would lie inside another run, or hold one (no-nesting).
var errNested = errors.New("journal: runs never nest")

// listedName is a name of a listing; modTime is known only for a durable
// write's temporary file (its age tells an interrupted write).
type listedName struct {
	name    string
	regular bool
	modTime time.Time
}

// DirStore returns the local directory dir as a [Store], written with the
// durable-write sequence (immutable-chained-entries). [Open](dir) is
// [OpenStore] of DirStore(dir), with the checks only a directory has
// (private-run-directory, hostile-directories).
func DirStore(dir string) Store { return newDirStore(fsys.OS{}, dir) }

func newDirStore(fsy fsys.FS, dir string) *dirStore { return &dirStore{fs: fsy, dir: dir} }

// dirStore is the local directory; loc asks it, beyond the Store, what only
// it can tell: file types and modes, a record linked before a failure, its
// ancestors.
type dirStore struct {
	fs   fsys.FS
	dir  string
	held atomic.Pointer[func()] // the release of the marker Create made, until Hold takes it
}

// nestedDir is loc.nested for the directory: an ancestor (unless inRoot) or
// a subdirectory (but the root's own shards) holding run.json.
func (d *dirStore) nestedDir(inRoot bool, shards int) error {
	abs, err := filepath.Abs(d.dir)
	if err != nil {
		return nil // the scan reports what is wrong with the path
	}
	for p := filepath.Dir(abs); !inRoot; p = filepath.Dir(p) {
		if _, err := d.fs.Stat(filepath.Join(p, record.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s lies inside the run %s", errNested, escapeName(d.dir), escapeName(p))
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	des, err := d.fs.ReadDir(d.dir, record.MaxFiles+1)
	if err != nil {
		return nil
	}
	for _, de := range des {
		if !de.IsDir() || ownShard(de.Name(), shards) {
			continue
		}
		sub := filepath.Join(d.dir, de.Name())
		if _, err := d.fs.Stat(filepath.Join(sub, record.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s holds the run %s", errNested, escapeName(d.dir), escapeName(sub))
		}
	}
	return nil
}

// listDir is loc.list for the directory: each name's type (and a temporary
// file's age), but the root's own shards, and the directory's mode.
func (d *dirStore) listDir(ctx context.Context, shards int) ([]listedName, []Finding, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	info, err := d.fs.Stat(d.dir)
	if err != nil {
		return nil, nil, err
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("%w: %s is not a directory (%s)", ErrNotRun, escapeName(d.dir), fileType(info.Mode()))
	}
	des, err := d.fs.ReadDir(d.dir, record.MaxFiles+1)
	if err != nil {
		return nil, nil, err
	}
	var findings []Finding
	if p := info.Mode().Perm(); p&0o077 != 0 {
		findings = append(findings, Finding{".", fmt.Sprintf("mode %04o, want 0700 (a private run directory)", p)})
	}
	out := make([]listedName, 0, len(des))
	for _, de := range des {
		if de.IsDir() && ownShard(de.Name(), shards) {
			continue // a shard of this root: a run of its own
		}
		ln := listedName{name: de.Name(), regular: de.Type().IsRegular()}
		if _, ok := record.ParseTempName(de.Name()); ok {
			if info, err := de.Info(); err == nil {
				ln.modTime = info.ModTime()
			}
		}
		out = append(out, ln)
	}
	return out, findings, nil
}

// fileType names the type of what Stat found instead of a directory.
func fileType(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeDevice != 0:
		return "a device"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t == 0:
		return "a regular file"
	}
	return "not a regular file"
}

// put writes name durably through a temporary file (docs/policy.md: "The
// durable writes"); linked: name exists, as a record linked before a failed
// fsync does. The marker's file is locked before it is written and linked
// and stays open until release (marker-liveness; without locks nobody can
// tell its liveness, no refusal); one failing after its link is removed
// again (nothing was sent).
func (d *dirStore) put(name string, data []byte) (release func(), linked bool, err error) {
	tmp := filepath.Join(d.dir, record.TempName(name))
	f, err := d.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, err
	}
	marker := name == record.MarkerName
	if !marker {
		err = writeSyncClose(f, data)
	} else if err = f.Lock(true); err == nil || errors.Is(err, fsys.ErrNoLocks) {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if err == nil {
		err = d.fs.Link(tmp, filepath.Join(d.dir, name))
	}
	if err != nil {
		_ = d.fs.Remove(tmp)
		if marker {
			f.Close()
		}
		return nil, false, err
	}
	if err = d.fs.SyncDir(d.dir); err == nil {
		if err = d.fs.Remove(tmp); err == nil {
			err = d.fs.SyncDir(d.dir)
		}
	}
	switch {
	case !marker:
		return nil, true, err
	case err != nil:
		f.Close()
		if d.fs.Remove(filepath.Join(d.dir, record.MarkerName)) == nil {
			_ = d.fs.SyncDir(d.dir)
		}
		_ = d.fs.Remove(tmp)
		return nil, false, err
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, true, nil
}

// Create implements [Store] with put; the marker's release waits for Hold.
func (d *dirStore) Create(_ context.Context, name string, data []byte) (string, error) {
	release, _, err := d.put(name, data)
	if release != nil {
		if old := d.held.Swap(&release); old != nil {
			(*old)() // an earlier marker's, never held
		}
	}
	return "", err
}

// Hold implements [Store]: Create took the marker's lock; release closes its file.
func (d *dirStore) Hold(_ context.Context, name, _ string) (func(), error) {
	release := d.held.Swap(nil)
	if name != record.MarkerName || release == nil {
		return nil, errors.New("journal: only a marker this store created is held")
	}
	return *release, nil
}

// Live implements [Store] by probing the marker's lock with a shared one,
// taken without waiting and released at once (marker-liveness).
func (d *dirStore) Live(ctx context.Context, name string) (bool, string, error) {
	if name != record.MarkerName {
		return false, "", errors.New("journal: only the marker is held")
	}
	if err := ctx.Err(); err != nil {
		return false, "", err // cannot tell
	}
	path := filepath.Join(d.dir, record.MarkerName)
	f, err := d.fs.OpenFile(path, fsys.ReadFlags, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, "", fs.ErrNotExist
	case err != nil:
		return false, "", nil // a symbolic link, say: never a worker's marker
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return false, "", nil // a FIFO, a device: never a worker's marker
	}
	switch err := f.Lock(false); {
	case err == nil:
		// Unlocked: dead, unless its worker removed it (and let its lock
		// go) since this open; then the name is gone, or another marker's.
		if now, err := d.fs.Stat(path); err != nil || !os.SameFile(info, now) {
			return false, "", fs.ErrNotExist
		}
		return false, "", nil
	case errors.Is(err, fsys.ErrLocked):
		return true, "", nil
	}
	return false, "", fsys.ErrNoLocks
}

// Read implements [Store] with the scan's checks of a directory's file
// (loc.read): its finding is the error.
func (d *dirStore) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	s := &snapshot{}
	if data, _, ok := locOf(d).with(ctx).read(s, name, limit+1); ok {
		return data, "", nil
	}
	if _, err := d.fs.Stat(filepath.Join(d.dir, name)); errors.Is(err, fs.ErrNotExist) {
		return nil, "", err
	}
	return nil, "", fmt.Errorf("journal: %s", s.findings[0])
}

func (d *dirStore) List(_ context.Context, limit int) ([]string, error) {
	des, err := d.fs.ReadDir(d.dir, limit)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(des))
	for i, de := range des {
		out[i] = de.Name()
	}
	return out, nil
}

// Remove implements [Store] for the marker or an older head (no versions).
func (d *dirStore) Remove(_ context.Context, name, _ string) error {
	if _, head := record.ParseHeadName(name); !head && name != record.MarkerName {
		return errors.New("journal: only the pending marker and older heads are ever removed")
	}
	if err := d.fs.Remove(filepath.Join(d.dir, name)); err != nil {
		return err
	}
	return d.fs.SyncDir(d.dir)
}

// loc is where a run is kept, the journal's one view of its [Store], bound
// to the caller's context (with) and to a parallel run's root (asRoot) or
// shard (shard). An operation has one branch for the local directory, dir.
type loc struct {
	st     Store
	dir    *dirStore // st when it is the local directory, else nil
	prefix string    // a shard's in a Store ("shard-KK/"), before each name
	name   string
	shards int             // a parallel run's root's shard count: shard-01 … are its own
	inRoot bool            // a shard, which lies inside its root by design
	heads  *sync.Map       // head → version, of those this loc created (removed unread); with's copies share it
	ctx    context.Context // the caller's, of the current call (with)
	own    *lightMarker    // this Journal's marker under its claim: live, its bytes known
	light  *lightView      // makes the scan the check across shards
}

// locOf is the journal's view of st.
func locOf(st Store) *loc {
	l := &loc{st: st, name: "store", heads: &sync.Map{}, ctx: context.Background()}
	if d, ok := st.(*dirStore); ok {
		l.dir, l.name = d, d.dir
	} else if s, ok := st.(fmt.Stringer); ok {
		l.name = s.String()
	}
	return l
}

// asRoot is the location as the root of n shards, which its listing leaves
// out and nested allows.
func (l *loc) asRoot(n int) *loc {
	c := *l
	c.shards, c.heads = n, &sync.Map{}
	return &c
}

// shard is shard k of a root (asRoot): the location shard-KK inside it.
func (l *loc) shard(k int) *loc {
	c := *l
	c.shards, c.inRoot, c.heads = 0, true, &sync.Map{}
	if l.dir != nil {
		c.dir = newDirStore(l.dir.fs, filepath.Join(l.dir.dir, record.ShardName(k)))
		c.st, c.name = c.dir, c.dir.dir
	} else {
		c.prefix = record.ShardName(k) + "/"
		c.name = l.name + c.prefix
	}
	return &c
}

// with is the location bound to ctx: its lists and reads honour ctx (R85),
// its writes stay detached (wctx).
func (l *loc) with(ctx context.Context) *loc {
	c := *l
	c.ctx = ctx
	if ctx == nil {
		c.ctx = context.Background()
	}
	return &c
}

// rctx bounds a list or read by the caller's context, and by storeTimeout
// for a store that never answers.
func (l *loc) rctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.ctx, storeTimeout)
}

// wctx bounds a write by storeTimeout only: a record, head or marker
// removal left half done is worse than a late one (a marker kept by the
// caller's cancellation would leave the run unresolved).
func (l *loc) wctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(l.ctx), storeTimeout)
}

func ownShard(name string, shards int) bool {
	k, ok := record.ParseShardName(name)
	return ok && k <= shards
}

// ownShardName reports whether name lies in one of the root's shards.
func ownShardName(name string, shards int) bool {
	sh, _, ok := strings.Cut(name, "/")
	return ok && ownShard(sh, shards)
}

// names lists the location's names in the Store (a root's include its
// shards'); a shard's by ListPrefix, else by a listing of the whole root.
func (l *loc) names(ctx context.Context) ([]string, error) {
	limit := (record.MaxFiles + 1) * (l.shards + 1)
	if l.prefix == "" {
		return l.st.List(ctx, limit)
	}
	var names []string
	var err error
	if pl, ok := l.st.(prefixLister); ok {
		names, err = pl.ListPrefix(ctx, l.prefix, limit)
	} else {
		names, err = l.st.List(ctx, (record.MaxFiles+1)*(record.MaxParallel+1))
	}
	if err != nil {
		return nil, err
	}
	out := names[:0:0]
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, l.prefix); ok && len(out) < limit {
			out = append(out, rest)
		}
	}
	return out, nil
}

// nested wraps errNested when the location lies inside another run (a
// directory's ancestors; EnclosingRun) or holds one (a listing of x/ that
// has x/y/run.json), but a root's own shards (no-nesting).
func (l *loc) nested() error {
	if l.dir != nil {
		return l.dir.nestedDir(l.inRoot, l.shards)
	}
	ctx, cancel := l.rctx()
	defer cancel()
	if e, ok := l.st.(enclosing); ok && !l.inRoot {
		outer, err := e.EnclosingRun(ctx)
		if err != nil {
			return fmt.Errorf("journal: cannot tell whether %s lies inside another run: %w", escapeName(l.name), err)
		}
		if outer != "" {
			return fmt.Errorf("%w: %s lies inside the run %s", errNested, escapeName(l.name), escapeName(outer))
		}
	}
	names, err := l.names(ctx)
	if err != nil {
		return nil // the scan reports it
	}
	for _, n := range names {
		if ownShardName(n, l.shards) && strings.Count(n, "/") == 1 {
			continue
		}
		if i := strings.LastIndexByte(n, '/'); i >= 0 && n[i+1:] == record.ManifestName {
			return fmt.Errorf("%w: %s holds the run %s", errNested, escapeName(l.name), escapeName(n[:i+1]))
		}
	}
	return nil
}

// list returns the run's names and findings about the location; its error
// means the location cannot be read. A light scan leaves out what cannot
// restrict another shard (lightView).
func (l *loc) list() (out []listedName, where []Finding, err error) {
	ctx, cancel := l.rctx()
	defer cancel()
	if l.dir != nil {
		out, where, err = l.dir.listDir(ctx, l.shards)
	} else {
		var names []string
		names, err = l.names(ctx)
		for _, n := range names {
			if !ownShardName(n, l.shards) { // else a record of one of this root's shards
				out = append(out, listedName{name: n, regular: true})
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if l.light != nil {
		out = l.light.filter(out)
	}
	return out, where, nil
}

// read reads name (at most limit bytes) for scan: a problem is a finding on
// s (when not nil) and ok false. A directory's file is read by readCapped.
func (l *loc) read(s *snapshot, name string, limit int64) ([]byte, string, bool) {
	switch {
	case name == record.MarkerName && l.own != nil:
		return l.own.data, l.own.version, true
	case name == record.MarkerName && l.light != nil:
		return l.light.read(l, s, limit)
	}
	bad := func(format string, args ...any) ([]byte, string, bool) {
		s.addFinding(name, format, args...)
		return nil, "", false
	}
	ctx, cancel := l.rctx()
	defer cancel()
	if l.dir != nil {
		if err := ctx.Err(); err != nil {
			return bad("not read: %s", err)
		}
		data, ok := readCapped(l.dir.fs, s, l.dir.dir, name, limit)
		return data, "", ok
	}
	data, version, err := l.st.Read(ctx, l.prefix+name, limit)
	switch {
	case err != nil:
		return bad("unreadable: %s", redact.Text(err.Error()))
	case int64(len(data)) > limit:
		return bad("over the %d-byte cap", limit)
	case len(data) == 0:
		return bad("empty (truncated)")
	}
	return data, version, true
}

// initRun prepares the empty location of a new run (exists: the directory
// is there); a Store needs nothing.
func (l *loc) initRun(exists bool) error {
	d := l.dir
	switch {
	case d == nil:
		return nil
	case exists:
		return d.fs.Chmod(d.dir, 0o700)
	}
	if err := d.fs.Mkdir(d.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another worker creating the same run made it (0700)
		}
		return err
	}
	return d.fs.SyncDir(filepath.Dir(d.dir))
}

// put stores an immutable record exclusively; stored: name exists durably,
// as it may despite an error (linked before the directory fsync failed).
func (l *loc) put(name string, data []byte) (stored bool, err error) {
	if l.dir != nil {
		_, stored, err = l.dir.put(name, data)
		return stored, err
	}
	ctx, cancel := l.wctx()
	defer cancel()
	version, err := l.st.Create(ctx, l.prefix+name, data)
	if _, head := record.ParseHeadName(name); head && err == nil && version != "" {
		l.heads.Store(name, version)
	}
	return err == nil, err
}

// createMarker creates the marker exclusively (an existing one: fs.ErrExist)
// and holds it live until release. A failed hold removes it again: nothing
// is sent under a marker that no other worker could tell alive.
func (l *loc) createMarker(data []byte) (string, func(), error) {
	ctx, cancel := l.wctx()
	defer cancel()
	version, err := l.st.Create(ctx, l.prefix+record.MarkerName, data)
	if err != nil {
		return "", nil, err
	}
	release, err := l.st.Hold(ctx, l.prefix+record.MarkerName, version)
	if err != nil {
		_ = l.st.Remove(ctx, l.prefix+record.MarkerName, version)
		return "", nil, fmt.Errorf("hold %s live: %w", record.MarkerName, err)
	}
	return version, release, nil
}

// live tells whether the marker's worker holds it now, and its version.
func (l *loc) live() (liveness, string) {
	if l.own != nil {
		return holdLive, l.own.version // this Journal's own, held
	}
	ctx, cancel := l.rctx()
	defer cancel()
	live, version, err := l.st.Live(ctx, l.prefix+record.MarkerName)
	if l.light != nil {
		l.light.probed = version
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return holdGone, ""
	case err != nil:
		return holdUnknown, ""
	case live:
		return holdLive, version
	}
	return holdNone, version
}

// removeHead removes a head a newer one replaced, on the version its
// creation returned, else on the one read now (it may be another worker's;
// a directory has no versions).
func (l *loc) removeHead(name string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	v, own := l.heads.LoadAndDelete(name)
	version, _ := v.(string)
	if !own && l.dir == nil {
		var err error
		if _, version, err = l.st.Read(ctx, l.prefix+name, record.MaxRecordBytes); err != nil {
			return err
		}
	}
	return l.st.Remove(ctx, l.prefix+name, version)
}

// removeDead removes another worker's marker while it is still the one whose bytes have
// digest, on its version (Blob: If-Match). A directory has no versions: there it takes an
// exclusive lock without waiting on the marker file (a live one is its worker's) and
// checks that the name is still that file, so that two workers removing one dead marker
// never remove the next worker's.
func (l *loc) removeDead(digest string) error {
	if d := l.dir; d != nil {
		path := filepath.Join(d.dir, record.MarkerName)
		f, err := d.fs.OpenFile(path, fsys.ReadFlags, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Lock(true); err != nil && !errors.Is(err, fsys.ErrNoLocks) {
			return err // held: live, or another worker removing it
		}
		info, err := f.Stat()
		if named, nerr := d.fs.Stat(path); err != nil || nerr != nil || !os.SameFile(info, named) {
			return fs.ErrNotExist
		}
	}
	data, version, ok := l.read(nil, record.MarkerName, record.MaxRecordBytes)
	if !ok || record.DigestOf(data) != digest {
		return errors.New("journal: the marker changed since it was read: not removed")
	}
	return l.removeMarker(version)
}

func (l *loc) removeMarker(version string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	return l.st.Remove(ctx, l.prefix+record.MarkerName, version)
}

// OpenStore opens the run kept in st as [Open] does a directory
// (OpenStore(ctx, DirStore(dir), opts...) is Open(dir, opts...)): it
// creates a new run when st holds nothing (never with [Existing]), or opens
// and verifies the existing one. Any number of processes may open, or
// create together, the same run (docs/policy.md: shared-runs). ctx bounds
// every list and read of the opening (its writes, when it creates the run,
// are detached under their own bound), never the Journal's later calls.
func OpenStore(ctx context.Context, st Store, opts ...Option) (*Journal, error) {
	switch {
	case st == nil:
		return nil, errors.New("journal: nil Store")
	case ctx == nil:
		return nil, errors.New("journal: open: nil context")
	case ctx.Err() != nil:
		return nil, fmt.Errorf("journal: open: %w", ctx.Err())
	}
	return openLoc(ctx, locOf(st), opts)
}

// WithPendingWait lets [Journal.Admit] and [Journal.Begin] wait, up to d,
// for the pending marker of another worker's request to go (docs/policy.md:
// shared-runs), instead of refusing at once with an unresolved status
// ([ErrPending]). The wait honours the caller's context. A marker whose
// worker the store shows dead (marker-liveness) ends the wait at once; one
// still live after d is refused as a request in flight, never judged dead
// by its age. Default: 0, no wait. A negative d is ignored.
func WithPendingWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.pendingWait = d
		}
	})
}

// InspectStore checks the run kept in st (a directory: [DirStore]) without
// changing it, and returns in Summary.Findings every finding, one per
// problem, as docs/policy.md ("The journal in detail") lists them (the
// location, every file, the chain and a pending marker), and in Summary the
// counts of what the run holds (`readrecovery journal verify`'s "ok" line). No findings means the run can never be unresolved but by
// clock regression, which depends on the time of the question (see
// [Journal.Status]). The error is non-nil only when the run itself cannot
// be read: it does not exist or holds no run (errors.Is(err,
// fs.ErrNotExist)), is not a directory, or cannot be listed.
func InspectStore(ctx context.Context, st Store) (Summary, error) {
	switch {
	case st == nil:
		return Summary{}, errors.New("journal: nil Store")
	case ctx == nil:
		return Summary{}, errors.New("journal: inspect: nil context")
	case ctx.Err() != nil:
		return Summary{}, fmt.Errorf("journal: inspect: %w", ctx.Err())
	}
	return inspect(locOf(st).with(ctx))
}
