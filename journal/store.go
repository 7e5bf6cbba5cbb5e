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
	"time"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// Store is where a run's records live (shared-runs): a flat set of named,
// immutable objects plus the one pending marker; formats, digests, the
// chain and the limits are the journal's. [DirStore] is the local
// directory; the nested module github.com/readrecovery/readrecovery/azure/blobjournal
// keeps runs in Azure Blob Storage. A Store must not retry a write in a
// way that could store an object twice, nor send through the transport of
// the run it records: a failure is a persistence failure, never a wait.
//
// A Store may have two more methods, which the journal finds by a type
// assertion:
//
//	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
//	EnclosingRun(ctx context.Context) (string, error)
//
// ListPrefix lists only the names that start with prefix (Blob Storage: a
// listing with that prefix), whole names (the prefix included): the
// shards of a parallel run ([WithParallel]) live under the prefixes
// shard-01/ … shard-NN/ of their root's Store, and each shard's listing
// uses ListPrefix when the Store has it, else List of the whole root,
// filtered. EnclosingRun tells whether the run lies inside another run (a
// Blob prefix under a prefix that holds a run.json): it returns the
// enclosing run's name, or "" when there is none, and [OpenStore] refuses
// such a run (runs never nest).
type Store interface {
	// Create stores data under name if and only if no object of that name
	// exists (O_EXCL; Blob: If-None-Match: *), durably before it returns,
	// and returns the stored object's version (an ETag; "" when the store
	// has none). When name exists it returns an error for which
	// errors.Is(err, fs.ErrExist) holds and changes nothing.
	Create(ctx context.Context, name string, data []byte) (version string, err error)
	// Read returns the content of name and its version. It reads at most
	// limit+1 bytes, so that a larger object is seen as such without
	// reading all of it. A missing name: errors.Is(err, fs.ErrNotExist).
	Read(ctx context.Context, name string, limit int64) (data []byte, version string, err error)
	// List returns the names of at most limit objects of the run, in any
	// order; an empty run gives none and no error.
	List(ctx context.Context, limit int) ([]string, error)
	// Remove deletes name only while its version is still version (Blob:
	// If-Match; a store without versions ignores it). The journal removes
	// only the pending marker and a head a newer head replaced.
	Remove(ctx context.Context, name, version string) error
	// Hold keeps the marker name this process just created (version from
	// Create) live until release (marker-liveness): Live tells every
	// process that its worker is alive, however long its request and
	// whatever any clock says. A dead process's hold ends by the store's
	// own means (the kernel's lock, the service's lease). The journal
	// releases after the marker's removal; a failed Hold is a persistence
	// failure (the marker is removed again, nothing is sent).
	Hold(ctx context.Context, name, version string) (release func(), err error)
	// Live reports whether a process holds name now, and its version
	// ("" without versions). A marker is live from its Create on (a store
	// whose hold begins at Hold counts the moments between as live by its
	// own means). A missing name: errors.Is(err, fs.ErrNotExist); any
	// other error means the store cannot tell (no locks): the marker is
	// then treated as dead.
	Live(ctx context.Context, name string) (live bool, version string, err error)
}

// liveness is what the store tells of a marker's worker (R83).
type liveness int

const (
	holdNone    liveness = iota // no lock or lease: its worker died, or the marker was made by hand
	holdLive                    // its worker holds it: a request in flight
	holdUnknown                 // the store cannot tell (no locks): treated as dead
	holdGone                    // removed since the listing
)

// storeTimeout bounds each request of a Store; lists and reads are bounded
// by the caller's context too (R85), writes only by this (loc.wctx).
const storeTimeout = 30 * time.Second

// pendingPoll is how often a Journal opened [WithPendingWait] looks again
// for another worker's marker to go.
const pendingPoll = 25 * time.Millisecond

// prefixLister is a [Store] with ListPrefix (see Store).
type prefixLister interface {
	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
}

// enclosing is a [Store] with EnclosingRun (see Store).
type enclosing interface {
	EnclosingRun(ctx context.Context) (string, error)
}

// errNested means a run would lie inside another run, or hold one
// (no-nesting): a run's records are only its own, so Open and OpenStore refuse it
// and write nothing.
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

// dirStore is the local directory: beyond the Store, it tells the journal
// (loc) each name's file type and mode, the directory's mode, and whether
// it lies inside a run.
type dirStore struct {
	fs  fsys.FS
	dir string

	mu   sync.Mutex
	held func() // the release of the marker Create made, until Hold takes it
}

// ownShard reports whether name is one of the root's shards.
func ownShard(name string, shards int) bool {
	k, ok := parseShardName(name)
	return ok && k <= shards
}

var _ Store = (*dirStore)(nil)

// nestedDir refuses a directory inside a run (an ancestor holds run.json,
// unless inRoot: a shard lies inside its root) or holding one (a
// subdirectory, other than the root's own shards, holds run.json).
func (d *dirStore) nestedDir(inRoot bool, shards int) error {
	abs, err := filepath.Abs(d.dir)
	if err != nil {
		return nil // the scan reports what is wrong with the path
	}
	for p := filepath.Dir(abs); !inRoot; p = filepath.Dir(p) {
		if _, err := d.fs.Stat(filepath.Join(p, manifestName)); err == nil {
			return fmt.Errorf("%w: %s lies inside the run %s", errNested, escapeName(d.dir), escapeName(p))
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	des, err := d.fs.ReadDir(d.dir, maxFiles+1)
	if err != nil {
		return nil
	}
	for _, de := range des {
		if !de.IsDir() || ownShard(de.Name(), shards) {
			continue
		}
		sub := filepath.Join(d.dir, de.Name())
		if _, err := d.fs.Stat(filepath.Join(sub, manifestName)); err == nil {
			return fmt.Errorf("%w: %s holds the run %s", errNested, escapeName(d.dir), escapeName(sub))
		}
	}
	return nil
}

// listDir lists the directory with each name's type (and a temporary
// file's age), leaving out the root's own shards, plus findings about the
// directory itself.
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
	des, err := d.fs.ReadDir(d.dir, maxFiles+1)
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
		if _, ok := parseTempName(de.Name()); ok {
			if info, err := de.Info(); err == nil {
				ln.modTime = info.ModTime()
			}
		}
		out = append(out, ln)
	}
	return out, findings, nil
}

// fileType names the type of a file that is not what the journal expects.
func fileType(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeDevice != 0:
		return "a device"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t == 0:
		return "a regular file"
	}
	return "not a regular file"
}

// readDir reads name with the checks of the directory (readCapped):
// problems become findings on s (when s is not nil).
func (d *dirStore) readDir(ctx context.Context, s *snapshot, name string, limit int64) ([]byte, bool) {
	if err := ctx.Err(); err != nil {
		if s != nil {
			s.addFinding(name, "not read: %s", err)
		}
		return nil, false
	}
	return readCapped(d.fs, s, d.dir, name, limit)
}

func (d *dirStore) initRun(exists bool) error {
	if exists {
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

// put writes name durably through a temporary file (docs/policy.md: "The
// durable writes"). A failure before the link removes the temporary file.
func (d *dirStore) put(name string, data []byte) (linked bool, err error) {
	tmp := filepath.Join(d.dir, tempName(name))
	f, err := d.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if err := writeSyncClose(f, data); err != nil {
		_ = d.fs.Remove(tmp)
		return false, err
	}
	return d.linkTemp(tmp, name)
}

// linkTemp links tmp to name (failing if name exists) and ends the
// durable write. linked reports whether name exists: a record linked
// before a failed fsync is in the run (the caller keeps the marker).
func (d *dirStore) linkTemp(tmp, name string) (linked bool, err error) {
	if err := d.fs.Link(tmp, filepath.Join(d.dir, name)); err != nil {
		_ = d.fs.Remove(tmp)
		return false, err
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return true, err
	}
	if err := d.fs.Remove(tmp); err != nil {
		return true, err
	}
	return true, d.fs.SyncDir(d.dir)
}

// createMarker creates the marker from a temporary file locked before it
// is written and linked, held until release (marker-liveness). Without
// locks (fsys.ErrNoLocks) nobody can tell its liveness: not a refusal. A
// failure after the link removes the marker again (nothing was sent).
func (d *dirStore) createMarker(data []byte) (func(), error) {
	tmp := filepath.Join(d.dir, tempName(markerName))
	f, err := d.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err = f.Lock(true); errors.Is(err, fsys.ErrNoLocks) {
		err = nil
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	linked := false
	if err == nil {
		linked, err = d.linkTemp(tmp, markerName)
	} else {
		_ = d.fs.Remove(tmp)
	}
	if err != nil {
		f.Close()
		if linked && d.fs.Remove(filepath.Join(d.dir, markerName)) == nil {
			_ = d.fs.SyncDir(d.dir)
		}
		if linked {
			_ = d.fs.Remove(tmp)
		}
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// Create implements [Store]: any name atomically through its temporary
// file; the marker held by its lock from before its name appears, until
// [dirStore.Hold]'s release.
func (d *dirStore) Create(_ context.Context, name string, data []byte) (string, error) {
	if name != markerName {
		_, err := d.put(name, data)
		return "", err
	}
	release, err := d.createMarker(data)
	if err == nil {
		d.mu.Lock()
		if d.held != nil {
			d.held()
		}
		d.held = release
		d.mu.Unlock()
	}
	return "", err
}

// Hold implements [Store]: the marker's lock is taken by Create already;
// release closes the locked file.
func (d *dirStore) Hold(_ context.Context, name, _ string) (func(), error) {
	d.mu.Lock()
	release := d.held
	d.held = nil
	d.mu.Unlock()
	if name != markerName || release == nil {
		return nil, errors.New("journal: only a marker this store created is held")
	}
	return release, nil
}

// Live implements [Store] by probing the marker's lock with a shared one,
// taken without waiting and released at once (marker-liveness).
func (d *dirStore) Live(ctx context.Context, name string) (bool, string, error) {
	if name != markerName {
		return false, "", errors.New("journal: only the marker is held")
	}
	if err := ctx.Err(); err != nil {
		return false, "", err // cannot tell
	}
	path := filepath.Join(d.dir, markerName)
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

// Read implements [Store] with the checks of the directory: a regular,
// private file, opened without following a link.
func (d *dirStore) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	s := newSnapshot()
	data, ok := d.readDir(ctx, s, name, limit+1)
	if !ok {
		if _, err := d.fs.Stat(filepath.Join(d.dir, name)); errors.Is(err, fs.ErrNotExist) {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("journal: %s", s.findings[0])
	}
	return data, "", nil
}

// List implements [Store].
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

// Remove implements [Store] for the marker or an older head, and fsyncs
// the directory; a directory has no versions.
func (d *dirStore) Remove(_ context.Context, name, _ string) error {
	if _, head := parseHeadName(name); !head && name != markerName {
		return errors.New("journal: only the pending marker and older heads are ever removed")
	}
	if err := d.fs.Remove(filepath.Join(d.dir, name)); err != nil {
		return err
	}
	return d.fs.SyncDir(d.dir)
}

// loc is where a run is kept, the journal's one view of its [Store]: a
// few functions over the Store's operations, bound to the caller's
// context (with), to a parallel run's root (asRoot) or one of its shards
// (shard). For the local directory (dir, the Store itself) the listing,
// reads, record writes and the nesting check ask the directory what only
// it can say: file types and modes, and whether a record was linked
// before a failure.
type loc struct {
	st Store
	// dir is st when it is the local directory, else nil.
	dir *dirStore
	// prefix is a shard's in a Store ("shard-KK/"): every name of the
	// location is st's name prefix+name.
	prefix string
	name   string
	// shards is the shard count of a parallel run's root (its shards
	// shard-01 … are its own); inRoot marks a shard, which lies inside
	// its root by design.
	shards int
	inRoot bool
	// heads holds the version each head this loc created got, so that
	// its removal needs no read first; shared by the copies of with.
	heads *headVersions
	// ctx is the caller's context of the current call (nil: none).
	ctx context.Context
	// own is the marker this Journal holds under its claim, during a scan
	// of its own: live, with the bytes it wrote (no read).
	own *lightMarker
	// light makes the scan the check across shards (see lightView).
	light *lightView
}

type headVersions struct {
	mu sync.Mutex
	m  map[string]string
}

// locOf is the journal's view of st.
func locOf(st Store) *loc {
	l := &loc{st: st, name: "store", heads: &headVersions{}}
	if d, ok := st.(*dirStore); ok {
		l.dir, l.name = d, d.dir
	} else if s, ok := st.(fmt.Stringer); ok {
		l.name = s.String()
	}
	return l
}

// asRoot is the location as the root of a parallel run of n shards: its
// listing leaves out the shards, which nested allows.
func (l *loc) asRoot(n int) *loc {
	c := *l
	c.shards, c.heads = n, &headVersions{}
	return &c
}

// shard is shard k of a root (asRoot): the location shard-KK inside it.
func (l *loc) shard(k int) *loc {
	c := *l
	c.shards, c.inRoot, c.heads = 0, true, &headVersions{}
	if l.dir != nil {
		c.dir = newDirStore(l.dir.fs, filepath.Join(l.dir.dir, shardName(k)))
		c.st, c.name = c.dir, c.dir.dir
	} else {
		c.prefix = shardName(k) + "/"
		c.name = l.name + c.prefix
	}
	return &c
}

// with is the same location bound to the caller's ctx: every list and
// read of the copy honours ctx's deadline and cancellation (R85), while
// its writes stay detached (see wctx).
func (l *loc) with(ctx context.Context) *loc {
	c := *l
	c.ctx = ctx
	return &c
}

// ownShardName reports whether name lies in one of the root's shards.
func ownShardName(name string, shards int) bool {
	sh, _, ok := strings.Cut(name, "/")
	return ok && ownShard(sh, shards)
}

// names lists the location's names in the Store (a root's include its
// shards'); a shard's with the Store's ListPrefix when it has one, else
// from a listing of the whole root.
func (l *loc) names(ctx context.Context) ([]string, error) {
	limit := (maxFiles + 1) * (l.shards + 1)
	if l.prefix == "" {
		return l.st.List(ctx, limit)
	}
	var names []string
	var err error
	if pl, ok := l.st.(prefixLister); ok {
		names, err = pl.ListPrefix(ctx, l.prefix, limit)
	} else {
		names, err = l.st.List(ctx, (maxFiles+1)*(maxParallel+1))
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

// where names the location in messages.
func (l *loc) where() string { return l.name }

// nested returns an error wrapping errNested when the location lies inside
// another run (the directory's ancestors; a Store that can tell,
// EnclosingRun) or holds one (a flat listing of prefix x/ includes
// x/y/run.json); a parallel run's root holds its own shards, and a shard
// lies inside its root (no-nesting).
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
		if i := strings.LastIndexByte(n, '/'); i >= 0 && n[i+1:] == manifestName {
			return fmt.Errorf("%w: %s holds the run %s", errNested, escapeName(l.name), escapeName(n[:i+1]))
		}
	}
	return nil
}

// rctx bounds a list or read: the caller's context (R85), and
// storeTimeout besides, for a store that never answers.
func (l *loc) rctx() (context.Context, context.CancelFunc) {
	ctx := l.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, storeTimeout)
}

// wctx bounds a write: detached from the caller's cancellation, because a
// record, head or marker removal left half done is worse than a late one
// (a marker the caller's cancellation kept would leave the run
// unresolved), but never longer than its own bound, storeTimeout.
func (l *loc) wctx() (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if l.ctx != nil {
		ctx = context.WithoutCancel(l.ctx)
	}
	return context.WithTimeout(ctx, storeTimeout)
}

// list returns the names of the run with whether each is a regular file,
// and findings about the location itself. Its error means the location
// cannot be read (an empty list is no error). A light scan leaves out
// what cannot restrict another shard (lightView).
func (l *loc) list() ([]listedName, []Finding, error) {
	ctx, cancel := l.rctx()
	defer cancel()
	var out []listedName
	var where []Finding
	if l.dir != nil {
		var err error
		if out, where, err = l.dir.listDir(ctx, l.shards); err != nil {
			return nil, nil, err
		}
	} else {
		names, err := l.names(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			if !ownShardName(n, l.shards) { // else a record of one of this root's shards
				out = append(out, listedName{name: n, regular: true})
			}
		}
	}
	if l.light != nil {
		out = l.light.filter(out)
	}
	return out, where, nil
}

// read reads name (at most limit bytes) for scan: a problem becomes a
// finding on s (when s is not nil) and ok is false.
func (l *loc) read(s *snapshot, name string, limit int64) ([]byte, string, bool) {
	if name == markerName && l.own != nil {
		return l.own.data, l.own.version, true
	}
	if name == markerName && l.light != nil {
		return l.light.read(l, s, limit)
	}
	ctx, cancel := l.rctx()
	defer cancel()
	if l.dir != nil {
		data, ok := l.dir.readDir(ctx, s, name, limit)
		return data, "", ok
	}
	bad := func(format string, args ...any) ([]byte, string, bool) {
		if s != nil {
			s.addFinding(name, format, args...)
		}
		return nil, "", false
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

// initRun prepares an empty location for a new run; exists says that the
// location exists (an empty directory).
func (l *loc) initRun(exists bool) error {
	if l.dir != nil {
		return l.dir.initRun(exists)
	}
	return nil
}

// put stores an immutable record exclusively; stored reports whether name
// exists durably (it may, even with an error: a directory's record linked
// before its directory fsync failed).
func (l *loc) put(name string, data []byte) (stored bool, err error) {
	if l.dir != nil {
		return l.dir.put(name, data)
	}
	ctx, cancel := l.wctx()
	defer cancel()
	version, err := l.st.Create(ctx, l.prefix+name, data)
	if _, head := parseHeadName(name); head && err == nil && version != "" {
		l.heads.mu.Lock()
		if l.heads.m == nil {
			l.heads.m = map[string]string{}
		}
		l.heads.m[name] = version
		l.heads.mu.Unlock()
	}
	return err == nil, err
}

// createMarker creates the pending marker exclusively and holds it live
// (Store.Hold) until release; an existing marker is an error wrapping
// fs.ErrExist. A hold that fails removes the marker again: nothing is
// sent under a marker that no other worker could tell alive.
func (l *loc) createMarker(data []byte) (string, func(), error) {
	ctx, cancel := l.wctx()
	defer cancel()
	version, err := l.st.Create(ctx, l.prefix+markerName, data)
	if err != nil {
		return "", nil, err
	}
	release, err := l.st.Hold(ctx, l.prefix+markerName, version)
	if err != nil {
		_ = l.st.Remove(ctx, l.prefix+markerName, version)
		return "", nil, fmt.Errorf("hold %s live: %w", markerName, err)
	}
	return version, release, nil
}

// live tells whether the marker's worker holds it now, and the marker's
// version when the store has versions.
func (l *loc) live() (liveness, string) {
	if l.own != nil {
		return holdLive, l.own.version // this Journal's own, held
	}
	ctx, cancel := l.rctx()
	defer cancel()
	live, version, err := l.st.Live(ctx, l.prefix+markerName)
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

// removeHead removes a run head that a newer one replaced, conditionally
// on the version it has now: the version its creation returned when this
// loc created it, else read first (a head may be another worker's; a
// directory has no versions).
func (l *loc) removeHead(name string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	l.heads.mu.Lock()
	version, own := l.heads.m[name]
	delete(l.heads.m, name)
	l.heads.mu.Unlock()
	if !own && l.dir == nil {
		var err error
		if _, version, err = l.st.Read(ctx, l.prefix+name, maxRecordBytes); err != nil {
			return err
		}
	}
	return l.st.Remove(ctx, l.prefix+name, version)
}

// removeMarker removes the marker created with version.
func (l *loc) removeMarker(version string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	return l.st.Remove(ctx, l.prefix+markerName, version)
}

// OpenStore opens the run kept in st, as [Open] does for a directory:
// it creates a new run when st holds nothing, or opens and verifies the
// existing one. Any number of processes may open, or create together, the
// same run (docs/policy.md: shared-runs). ctx bounds every list and read
// of the opening (its writes, when it creates the run, are detached under
// their own bound), never the Journal's later calls.
// OpenStore(ctx, DirStore(dir), opts...) is Open(dir, opts...). With
// [Existing] it never creates.
func OpenStore(ctx context.Context, st Store, opts ...Option) (*Journal, error) {
	if st == nil {
		return nil, errors.New("journal: nil Store")
	}
	if ctx == nil {
		return nil, errors.New("journal: open: nil context")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("journal: open: %w", err)
	}
	return openLoc(ctx, locOf(st), opts)
}

// WithPendingWait lets [Journal.Admit] and [Journal.Begin] wait, up to d,
// for the pending marker of another worker's request to go (docs/policy.md:
// shared-runs), instead of refusing at once with an unresolved status
// ([ErrPending]). The wait honours the caller's context. A marker whose
// worker the store shows dead (marker-liveness) ends the wait at once;
// one still live after d is refused as a request in flight, never judged
// dead by its age. Default: 0, no wait. A negative d is ignored.
func WithPendingWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.pendingWait = d
		}
	})
}

// InspectStore checks the run kept in st (a directory: [DirStore]) without
// changing it and returns, in Summary.Findings, every finding, one per
// problem, as docs/policy.md ("The journal in detail") lists them: the
// location, every file (as the table fileKinds says), the chain and a
// pending marker. No findings means the run can never be unresolved
// except by clock regression, which depends on the time of the question
// (see [Journal.Status]).
//
// The error is non-nil only when the run itself cannot be read: it does
// not exist or holds no run (errors.Is(err, fs.ErrNotExist)), is not a
// directory, or cannot be listed. Summary also counts what the run holds,
// for a report such as `readrecovery journal verify`'s "ok" line.
func InspectStore(ctx context.Context, st Store) (Summary, error) {
	if st == nil {
		return Summary{}, errors.New("journal: nil Store")
	}
	if ctx == nil {
		return Summary{}, errors.New("journal: inspect: nil context")
	}
	if err := ctx.Err(); err != nil {
		return Summary{}, fmt.Errorf("journal: inspect: %w", err)
	}
	return inspect(locOf(st).with(ctx))
}
