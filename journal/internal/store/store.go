// Package store is where a run's files live: the [Store] interface the journal writes
// through, the local directory ([Dir], with the durable-write sequence and the checks only a
// directory has), and [Loc], the journal's one view of a Store bound to a context and to a
// parallel run's root or shard. It moves bytes and tells liveness; what the bytes mean is
// package record's, what a run is the scan's.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Liveness is what the store tells of a marker's worker (R83).
type Liveness int

const (
	HoldNone    Liveness = iota // no lock or lease: its worker died, or the marker was made by hand
	HoldLive                    // its worker holds it: a request in flight
	HoldUnknown                 // the store cannot tell (no locks): counts as live (deadMarker)
	HoldGone                    // removed since the listing
)

// storeTimeout bounds each Store request: lists and reads are bounded
// by the caller's context too (R85), writes only by this (wctx).
const storeTimeout = 30 * time.Second

// PrefixLister and enclosing are a Store with one of its optional methods.
type PrefixLister interface {
	ListPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
}
type enclosing interface {
	EnclosingRun(ctx context.Context) (string, error)
}

// ErrNested: a run would lie inside another run, or hold one (no-nesting).
var ErrNested = errors.New("journal: runs never nest")

// ListedName is a name of a listing; modTime is known only for a durable
// write's temporary file (its age tells an interrupted write).
type ListedName struct {
	Name    string
	Regular bool
	ModTime time.Time
}

// Loc is where a run is kept, the journal's one view of its [Store], bound
// to the caller's context (with) and to a parallel run's root (asRoot) or
// shard (shard). An operation has one branch for the local directory, dir.
type Loc struct {
	st     Store
	Dir    *Dir   // st when it is the local directory, else nil
	prefix string // a shard's in a Store ("shard-KK/"), before each name
	Name   string
	shards int             // a parallel run's root's shard count: shard-01 … are its own
	inRoot bool            // a shard, which lies inside its root by design
	heads  *sync.Map       // head → version, of those this loc created (removed unread); with's copies share it
	ctx    context.Context // the caller's, of the current call (with)
	Own    *LightMarker    // this Journal's marker under its claim: live, its bytes known
	Light  *LightView      // makes the scan the check across shards
}

// LocOf is the journal's view of st.
func LocOf(st Store) *Loc {
	l := &Loc{st: st, Name: "store", heads: &sync.Map{}, ctx: context.Background()}
	if d, ok := st.(*Dir); ok {
		l.Dir, l.Name = d, d.dir
	} else if s, ok := st.(fmt.Stringer); ok {
		l.Name = s.String()
	}
	return l
}

// AsRoot is the location as the root of n shards, which its listing leaves
// out and nested allows.
func (l *Loc) AsRoot(n int) *Loc {
	c := *l
	c.shards, c.heads = n, &sync.Map{}
	return &c
}

// Shard is shard k of a root (asRoot): the location shard-KK inside it.
func (l *Loc) Shard(k int) *Loc {
	c := *l
	c.shards, c.inRoot, c.heads = 0, true, &sync.Map{}
	if l.Dir != nil {
		c.Dir = NewDir(l.Dir.Fs, filepath.Join(l.Dir.dir, record.ShardName(k)))
		c.st, c.Name = c.Dir, c.Dir.dir
	} else {
		c.prefix = record.ShardName(k) + "/"
		c.Name = l.Name + c.prefix
	}
	return &c
}

// With is the location bound to ctx: its lists and reads honour ctx (R85),
// its writes stay detached (wctx).
func (l *Loc) With(ctx context.Context) *Loc {
	c := *l
	c.ctx = cmp.Or(ctx, context.Background())
	return &c
}

// rctx bounds a list or read by the caller's context, and by storeTimeout
// for a store that never answers.
func (l *Loc) rctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.ctx, storeTimeout)
}

// wctx bounds a write by storeTimeout only: a record, head or marker
// removal left half done is worse than a late one (a marker kept by the
// caller's cancellation would leave the run unresolved).
func (l *Loc) wctx() (context.Context, context.CancelFunc) {
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
func (l *Loc) names(ctx context.Context) ([]string, error) {
	limit := (record.MaxFiles + 1) * (l.shards + 1)
	if l.prefix == "" {
		return l.st.List(ctx, limit)
	}
	var names []string
	var err error
	if pl, ok := l.st.(PrefixLister); ok {
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

// Nested wraps errNested when the location lies inside another run (a
// directory's ancestors; EnclosingRun) or holds one (a listing of x/ that
// has x/y/run.json), but a root's own shards (no-nesting).
func (l *Loc) Nested() error {
	if l.Dir != nil {
		return l.Dir.nestedDir(l.inRoot, l.shards)
	}
	ctx, cancel := l.rctx()
	defer cancel()
	if e, ok := l.st.(enclosing); ok && !l.inRoot {
		outer, err := e.EnclosingRun(ctx)
		if err != nil {
			return fmt.Errorf("journal: cannot tell whether %s lies inside another run: %w", EscapeName(l.Name), err)
		}
		if outer != "" {
			return fmt.Errorf("%w: %s lies inside the run %s", ErrNested, EscapeName(l.Name), EscapeName(outer))
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
			return fmt.Errorf("%w: %s holds the run %s", ErrNested, EscapeName(l.Name), EscapeName(n[:i+1]))
		}
	}
	return nil
}

// List returns the run's names and findings about the location; its error
// means the location cannot be read. A light scan leaves out what cannot
// restrict another shard (lightView).
func (l *Loc) List() (out []ListedName, where []Finding, err error) {
	ctx, cancel := l.rctx()
	defer cancel()
	changed, out, where, ok := l.Light.cached(l)
	if ok {
		return out, where, nil
	}
	if l.Dir != nil {
		out, where, err = l.Dir.listDir(ctx, l.shards)
	} else {
		var names []string
		names, err = l.names(ctx)
		for _, n := range names {
			if !ownShardName(n, l.shards) { // else a record of one of this root's shards
				out = append(out, ListedName{Name: n, Regular: true})
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if l.Light != nil {
		out = l.Light.filter(out)
		l.Light.keep(changed, out, where)
	}
	return out, where, nil
}

// ChangeTime is the directory's change time (ctime, or on a system
// without one its mtime), zero for another store or when it cannot be read.
func (l *Loc) ChangeTime() (t time.Time) {
	if l.Dir != nil {
		if info, err := l.Dir.Fs.Stat(l.Dir.dir); err == nil {
			t = fsys.ChangeTime(info)
		}
	}
	return t
}

// Read reads name (at most limit bytes) for scan: a problem is a finding on
// s (when not nil) and ok false. A directory's file is read by readCapped.
func (l *Loc) Read(f *Findings, name string, limit int64) ([]byte, string, bool) {
	switch {
	case name == record.MarkerName && l.Own != nil:
		return l.Own.Data, l.Own.Version, true
	case name == record.MarkerName && l.Light != nil:
		return l.Light.read(l, f, limit)
	}
	bad := func(format string, args ...any) ([]byte, string, bool) {
		f.Add(name, format, args...)
		return nil, "", false
	}
	ctx, cancel := l.rctx()
	defer cancel()
	if l.Dir != nil {
		if err := ctx.Err(); err != nil {
			return bad("not read: %s", err)
		}
		data, ok := readCapped(l.Dir.Fs, f, l.Dir.dir, name, limit)
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

// InitRun prepares the empty location of a new run (exists: the directory
// is there); a Store needs nothing.
func (l *Loc) InitRun(exists bool) error {
	d := l.Dir
	switch {
	case d == nil:
		return nil
	case exists:
		return d.Fs.Chmod(d.dir, 0o700)
	}
	if err := d.Fs.Mkdir(d.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another worker creating the same run made it (0700)
		}
		return err
	}
	return d.Fs.SyncDir(filepath.Dir(d.dir))
}

// Put stores an immutable record exclusively; stored: name exists durably,
// as it may despite an error (linked before the directory fsync failed).
func (l *Loc) Put(name string, data []byte) (stored bool, err error) {
	if l.Dir != nil {
		_, stored, err = l.Dir.put(name, data)
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

// CreateMarker creates the marker exclusively (an existing one: fs.ErrExist)
// and holds it live until release. A failed hold removes it again: nothing
// is sent under a marker that no other worker could tell alive.
func (l *Loc) CreateMarker(data []byte) (string, func(), error) {
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

// Live tells whether the marker's worker holds it now, and its version.
func (l *Loc) Live() (Liveness, string) {
	if l.Own != nil {
		return HoldLive, l.Own.Version // this Journal's own, held
	}
	ctx, cancel := l.rctx()
	defer cancel()
	live, version, err := l.st.Live(ctx, l.prefix+record.MarkerName)
	if l.Light != nil {
		l.Light.probed = version
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return HoldGone, ""
	case err != nil:
		return HoldUnknown, ""
	case live:
		return HoldLive, version
	}
	return HoldNone, version
}

// RemoveHead removes a head a newer one replaced, on the version its
// creation returned, else on the one read now (it may be another worker's;
// a directory has no versions).
func (l *Loc) RemoveHead(name string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	v, own := l.heads.LoadAndDelete(name)
	version, _ := v.(string)
	if !own && l.Dir == nil {
		var err error
		if _, version, err = l.st.Read(ctx, l.prefix+name, record.MaxRecordBytes); err != nil {
			return err
		}
	}
	return l.st.Remove(ctx, l.prefix+name, version)
}

// RemoveDead removes another worker's marker while it is still the one whose bytes have
// digest, on its version (Blob: If-Match). A directory has no versions: there it takes an
// exclusive lock without waiting on the marker file (a live one is its worker's) and
// checks that the name is still that file, so that two workers removing one dead marker
// never remove the next worker's.
func (l *Loc) RemoveDead(digest string) error {
	if d := l.Dir; d != nil {
		path := filepath.Join(d.dir, record.MarkerName)
		f, err := d.Fs.OpenFile(path, fsys.ReadFlags, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Lock(true); err != nil && !errors.Is(err, fsys.ErrNoLocks) {
			return err // held: live, or another worker removing it
		}
		info, err := f.Stat()
		if named, nerr := d.Fs.Stat(path); err != nil || nerr != nil || !os.SameFile(info, named) {
			return fs.ErrNotExist
		}
	}
	data, version, ok := l.Read(nil, record.MarkerName, record.MaxRecordBytes)
	if !ok || record.DigestOf(data) != digest {
		return errors.New("journal: the marker changed since it was read: not removed")
	}
	return l.RemoveMarker(version)
}

func (l *Loc) RemoveMarker(version string) error {
	ctx, cancel := l.wctx()
	defer cancel()
	return l.st.Remove(ctx, l.prefix+record.MarkerName, version)
}

// Finding is one problem of a run directory, found by [InspectStore] or by the
// verification [Open] performs. Any finding makes the run unresolved.
type Finding struct {
	// File is the file's name inside the run directory, or "." for the
	// directory itself.
	File string
	// Problem says what is wrong, in a few words.
	Problem string
}

// String returns "file: problem", the line `readrecovery journal verify`
// prints. A file name that is not plain printable ASCII (a newline, an
// escape sequence, a quote, a space, anything else) is printed quoted with
// Go escapes, so that no name can forge a line or reach a terminal raw.
func (f Finding) String() string { return EscapeName(f.File) + ": " + f.Problem }

// EscapeName returns name as it is when it is plain printable ASCII
// without spaces, quotes or backslashes, else strconv.QuoteToASCII(name).
func EscapeName(name string) string {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool {
		return c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '\''
	}) {
		return strconv.QuoteToASCII(name)
	}
	return name
}

// Findings are the findings of a scan; a read adds its problem to them.
type Findings []Finding

// Add adds a finding; to nil Findings (a read that keeps none) it adds nothing.
func (f *Findings) Add(file, format string, args ...any) {
	if f != nil {
		*f = append(*f, Finding{File: file, Problem: fmt.Sprintf(format, args...)})
	}
}

// ErrNotRun means a directory holds files but none of the names a journal
// writes (run.json, backoff-*, receipt-*, …): it is not a journal run, and
// the journal neither reports it as a run nor writes into it.
var ErrNotRun = errors.New("journal: not a journal run (no run manifest)")

// LightView makes a shard's scan the check across shards (docs/policy.md:
// "Shards in detail"): no receipt, part receipt or head, so no sequence; the
// marker read again only when its version (Blob: the probe's ETag) changed.
// A directory's light listing is kept while its change time stays the one
// listed, and only when that time is before Ref, a change time of the same
// file system read before the listing began: any later change then bears a
// later time (as git's racily clean index entries).
type LightView struct {
	Mu     *sync.Mutex  // guards last: the root's
	Last   *LightMarker // the marker bytes this shard's light scan read last
	Ref    time.Time    // the store's time before the scan (loc.ChangeTime of another directory), or zero
	probed string       // the marker's version the liveness probe returned
}

// LightMarker is a marker's bytes and version, as read last (lightView) or
// written (loc.own), and a light scan's listing kept at the change time changed.
type LightMarker struct {
	Data    []byte
	Version string
	changed time.Time
	listed  []ListedName
	where   []Finding
}

// cached is l's change time and the listing kept for it, if any (lightView).
func (v *LightView) cached(l *Loc) (t time.Time, _ []ListedName, _ []Finding, _ bool) {
	if v == nil {
		return t, nil, nil, false
	}
	t = l.ChangeTime()
	v.Mu.Lock()
	defer v.Mu.Unlock()
	m := v.Last
	return t, slices.Clone(m.listed), m.where, !t.IsZero() && m.listed != nil && t.Equal(m.changed)
}

// keep keeps the listing of a directory whose change time is t (lightView).
func (v *LightView) keep(t time.Time, out []ListedName, where []Finding) {
	if !t.IsZero() && t.Before(v.Ref) {
		v.Mu.Lock()
		v.Last.changed, v.Last.listed, v.Last.where = t, slices.Clone(out), where
		v.Mu.Unlock()
	}
}

// filter leaves out receipts, part receipts, heads, writes in progress.
func (v *LightView) filter(names []ListedName) []ListedName {
	out := names[:0:0]
	for _, n := range names {
		k, seq := record.KindOf(n.Name)
		head := k != nil && k.Kind == record.KindHead && seq >= 1 // as ParseHeadName
		if _, temp := record.ParseTempName(n.Name); !temp && !head && (k == nil || !k.Attempted) {
			out = append(out, n)
		}
	}
	return out
}

// read reads l's marker unless its probed version is the one read last.
func (v *LightView) read(l *Loc, f *Findings, limit int64) ([]byte, string, bool) {
	v.Mu.Lock()
	m := *v.Last
	v.Mu.Unlock()
	if m.Data != nil && v.probed != "" && m.Version == v.probed {
		return m.Data, m.Version, true
	}
	plain := *l
	plain.Light = nil
	data, version, ok := plain.Read(f, record.MarkerName, limit)
	if ok {
		v.Mu.Lock()
		*v.Last = LightMarker{Data: data, Version: version}
		v.Mu.Unlock()
	}
	return data, version, ok
}
