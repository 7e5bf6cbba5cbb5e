package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/readrecovery/readrecovery/journal/internal/record"
)

func NewDir(fsy fsys.FS, dir string) *Dir { return &Dir{Fs: fsy, dir: dir} }

// dirStore is the local directory; loc asks it, beyond the Store, what only
// it can tell: file types and modes, a record linked before a failure, its
// ancestors.
type Dir struct {
	Fs   fsys.FS
	dir  string
	held atomic.Pointer[func()] // the release of the marker Create made, until Hold takes it
}

// nestedDir is loc.nested for the directory: an ancestor (unless inRoot) or
// a subdirectory (but the root's own shards) holding run.json.
func (d *Dir) nestedDir(inRoot bool, shards int) error {
	abs, err := filepath.Abs(d.dir)
	if err != nil {
		return nil // the scan reports what is wrong with the path
	}
	for p := filepath.Dir(abs); !inRoot; p = filepath.Dir(p) {
		if _, err := d.Fs.Stat(filepath.Join(p, record.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s lies inside the run %s", ErrNested, EscapeName(d.dir), EscapeName(p))
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	des, err := d.Fs.ReadDir(d.dir, record.MaxFiles+1)
	if err != nil {
		return nil
	}
	for _, de := range des {
		if !de.IsDir() || ownShard(de.Name(), shards) {
			continue
		}
		sub := filepath.Join(d.dir, de.Name())
		if _, err := d.Fs.Stat(filepath.Join(sub, record.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s holds the run %s", ErrNested, EscapeName(d.dir), EscapeName(sub))
		}
	}
	return nil
}

// listDir is loc.list for the directory: each name's type (and a temporary
// file's age), but the root's own shards, and the directory's mode.
func (d *Dir) listDir(ctx context.Context, shards int) ([]ListedName, []Finding, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	info, err := d.Fs.Stat(d.dir)
	if err != nil {
		return nil, nil, err
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("%w: %s is not a directory (%s)", ErrNotRun, EscapeName(d.dir), fileType(info.Mode()))
	}
	des, err := d.Fs.ReadDir(d.dir, record.MaxFiles+1)
	if err != nil {
		return nil, nil, err
	}
	var findings []Finding
	if p := info.Mode().Perm(); p&0o077 != 0 {
		findings = append(findings, Finding{".", fmt.Sprintf("mode %04o, want 0700 (a private run directory)", p)})
	}
	out := make([]ListedName, 0, len(des))
	for _, de := range des {
		if de.IsDir() && ownShard(de.Name(), shards) {
			continue // a shard of this root: a run of its own
		}
		ln := ListedName{Name: de.Name(), Regular: de.Type().IsRegular()}
		if _, ok := record.ParseTempName(de.Name()); ok {
			if info, err := de.Info(); err == nil {
				ln.ModTime = info.ModTime()
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
func (d *Dir) put(name string, data []byte) (release func(), linked bool, err error) {
	tmp := filepath.Join(d.dir, record.TempName(name))
	f, err := d.Fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, err
	}
	marker := name == record.MarkerName
	if marker {
		err = f.Lock(true)
	}
	if err == nil || errors.Is(err, fsys.ErrNoLocks) {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if !marker { // the marker's file stays open, and locked, until release
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = d.Fs.Link(tmp, filepath.Join(d.dir, name))
	}
	if err != nil {
		_ = d.Fs.Remove(tmp)
		if marker {
			f.Close()
		}
		return nil, false, err
	}
	if err = d.Fs.SyncDir(d.dir); err == nil {
		if err = d.Fs.Remove(tmp); err == nil {
			err = d.Fs.SyncDir(d.dir)
		}
	}
	switch {
	case !marker:
		return nil, true, err
	case err != nil:
		f.Close()
		if d.Fs.Remove(filepath.Join(d.dir, record.MarkerName)) == nil {
			_ = d.Fs.SyncDir(d.dir)
		}
		_ = d.Fs.Remove(tmp)
		return nil, false, err
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, true, nil
}

// Create implements [Store] with put; the marker's release waits for Hold.
func (d *Dir) Create(_ context.Context, name string, data []byte) (string, error) {
	release, _, err := d.put(name, data)
	if release != nil {
		if old := d.held.Swap(&release); old != nil {
			(*old)() // an earlier marker's, never held
		}
	}
	return "", err
}

// Hold implements [Store]: Create took the marker's lock; release closes its file.
func (d *Dir) Hold(_ context.Context, name, _ string) (func(), error) {
	release := d.held.Swap(nil)
	if name != record.MarkerName || release == nil {
		return nil, errors.New("journal: only a marker this store created is held")
	}
	return *release, nil
}

// Live implements [Store] by probing the marker's lock with a shared one,
// taken without waiting and released at once (marker-liveness).
func (d *Dir) Live(ctx context.Context, name string) (bool, string, error) {
	if name != record.MarkerName {
		return false, "", errors.New("journal: only the marker is held")
	}
	if err := ctx.Err(); err != nil {
		return false, "", err // cannot tell
	}
	path := filepath.Join(d.dir, record.MarkerName)
	f, err := d.Fs.OpenFile(path, fsys.ReadFlags, 0)
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
		if now, err := d.Fs.Stat(path); err != nil || !os.SameFile(info, now) {
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
func (d *Dir) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	var f Findings
	if data, _, ok := LocOf(d).With(ctx).Read(&f, name, limit+1); ok {
		return data, "", nil
	}
	if _, err := d.Fs.Stat(filepath.Join(d.dir, name)); errors.Is(err, fs.ErrNotExist) {
		return nil, "", err
	}
	return nil, "", fmt.Errorf("journal: %s", f[0])
}

func (d *Dir) List(_ context.Context, limit int) ([]string, error) {
	des, err := d.Fs.ReadDir(d.dir, limit)
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
func (d *Dir) Remove(_ context.Context, name, _ string) error {
	if _, head := record.ParseHeadName(name); !head && name != record.MarkerName {
		return errors.New("journal: only the pending marker and older heads are ever removed")
	}
	if err := d.Fs.Remove(filepath.Join(d.dir, name)); err != nil {
		return err
	}
	return d.Fs.SyncDir(d.dir)
}

// readCapped reads dir/name once the open file shows a regular, private file of at most
// limit bytes; problems become findings (when found is not nil). [fsys.ReadFlags] refuse a
// symbolic link and open a FIFO or device without blocking (hostile-directories).
func readCapped(fsy fsys.FS, found *Findings, dir, name string, limit int64) (data []byte, ok bool) {
	bad := func(format string, args ...any) ([]byte, bool) {
		found.Add(name, format, args...)
		return nil, false
	}
	f, err := fsy.OpenFile(filepath.Join(dir, name), fsys.ReadFlags, 0)
	switch {
	case err != nil && fsys.IsSymlinkRefusal(err):
		return bad("not a regular file")
	case err != nil:
		return bad("unreadable: %v", BareErr(err))
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return bad("unreadable: %v", err)
	case !info.Mode().IsRegular():
		return bad("not a regular file")
	case info.Size() > limit:
		return bad("%d bytes, over the %d-byte cap", info.Size(), limit)
	case info.Size() == 0:
		return bad("empty (truncated)")
	}
	if p := info.Mode().Perm(); p&0o077 != 0 {
		found.Add(name, "mode %04o, want 0600 (private)", p)
	}
	// Exactly the size Stat reported, in one read: a file that grew since is
	// cut short and fails its canonical check.
	data = make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return bad("unreadable: %v", err)
	}
	return data, true
}

// BareErr drops the path of a *fs.PathError (the finding names the file).
func BareErr(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
