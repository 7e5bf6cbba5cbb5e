// Package fsys is the journal's file-system seam: every file operation goes
// through an [FS], so that tests can fail or "crash" any single step of a
// write and check what a later process finds on disk. It is internal
// (docs/policy.md: clock-is-internal keeps seams out of the public API).
package fsys

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/readrecovery/readrecovery/internal/flock"
)

// FS is the set of file operations the journal uses. Names are full paths.
type FS interface {
	Mkdir(name string, perm fs.FileMode) error                      // os.Mkdir
	Chmod(name string, perm fs.FileMode) error                      // os.Chmod
	OpenFile(name string, flag int, perm fs.FileMode) (File, error) // os.OpenFile
	Link(oldname, newname string) error                             // os.Link: fails when newname exists
	Remove(name string) error                                       // os.Remove
	Stat(name string) (fs.FileInfo, error)                          // os.Stat: follows symbolic links
	// ReadDir returns at most n entries (all when n <= 0), in no order; none, no error, when empty.
	ReadDir(name string, n int) ([]fs.DirEntry, error)
	SyncDir(name string) error // flushes a directory's entries to stable storage
}

// File is an open file.
type File interface {
	io.Reader
	io.Writer
	io.Closer
	Sync() error                // flushes the content to stable storage
	Stat() (fs.FileInfo, error) // describes the open file
	// Lock takes a lock without waiting (flock(2) LOCK_NB; Windows:
	// LockFileEx of one byte beyond the data), exclusive or shared,
	// released when the file is closed (by Close or the process's death).
	// Another open file's lock: an error wrapping [ErrLocked]; a file
	// system or OS that keeps no locks: [ErrNoLocks].
	Lock(exclusive bool) error
}

// ReadFlags open a file to read it: internal/flock's, which on unix do not
// follow a symbolic link (the open fails with ELOOP) and do not block, so that
// a FIFO or a device opens at once and the caller's fstat refuses it as not a
// regular file. Elsewhere the journal relies on the listing's file type,
// checked before every open, and on fstat after it.
const ReadFlags = flock.ReadFlags

// The lock errors are the root's internal/flock's, whose Lock takes the
// lock on unix.
var (
	ErrLocked  = flock.ErrLocked  // another open file holds a conflicting lock
	ErrNoLocks = flock.ErrNoLocks // ENOLCK, EOPNOTSUPP, ENOSYS, or an OS without locks
)

// OS is the os package's file system: each method but ReadDir and SyncDir
// calls the os function of its name.
type OS struct{}

func (OS) Mkdir(name string, perm fs.FileMode) error { return os.Mkdir(name, perm) }
func (OS) Chmod(name string, perm fs.FileMode) error { return os.Chmod(name, perm) }
func (OS) Link(oldname, newname string) error        { return os.Link(oldname, newname) }
func (OS) Remove(name string) error                  { return os.Remove(name) }
func (OS) Stat(name string) (fs.FileInfo, error)     { return os.Stat(name) }

func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is an *os.File with [File.Lock], taken where the OS has locks
// (fsys_unix.go: internal/flock; lock_windows.go: LockFileEx); elsewhere Lock
// returns [ErrNoLocks] (lock_other.go).
type osFile struct{ *os.File }

func (f osFile) Lock(exclusive bool) error { return lock(f.File, exclusive) }
func (f osFile) Close() error              { unlock(f.File); return f.File.Close() }

// ReadDir opens the directory with [DirFlags]: a FIFO or device under name
// is refused at once, never waited on.
func (OS) ReadDir(name string, n int) ([]fs.DirEntry, error) {
	d, err := os.OpenFile(name, DirFlags, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	des, err := d.ReadDir(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return des, err
}

// SyncDir fsyncs the directory, so that its entries' creation, linking and
// removal are durable.
func (OS) SyncDir(name string) error {
	d, err := os.OpenFile(name, DirFlags, 0)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
