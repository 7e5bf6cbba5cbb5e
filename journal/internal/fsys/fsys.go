// Package fsys is the journal's file-system seam. The journal performs every
// file operation through an [FS], so that tests can fail or "crash" any single
// step of a write (create, write, fsync, close, link, remove, directory fsync)
// and check what a later process finds on disk. It is internal: users of the
// journal cannot replace the file system (docs/policy.md: clock-is-internal keeps seams out of the
// public API).
package fsys

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// FS is the set of file operations the journal uses. Names are full paths.
type FS interface {
	// Mkdir creates a directory (os.Mkdir).
	Mkdir(name string, perm fs.FileMode) error
	// Chmod changes a file's mode (os.Chmod).
	Chmod(name string, perm fs.FileMode) error
	// OpenFile opens or creates a file (os.OpenFile).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Link creates newname as a hard link to oldname; it fails when newname
	// exists (os.Link).
	Link(oldname, newname string) error
	// Remove removes a file (os.Remove).
	Remove(name string) error
	// Stat describes a file, following symbolic links (os.Stat).
	Stat(name string) (fs.FileInfo, error)
	// ReadDir returns at most n entries of a directory, in no particular
	// order; n <= 0 means all. An empty directory gives no entries and no
	// error.
	ReadDir(name string, n int) ([]fs.DirEntry, error)
	// SyncDir flushes a directory's entries to stable storage.
	SyncDir(name string) error
}

// File is an open file.
type File interface {
	io.Reader
	io.Writer
	io.Closer
	// Sync flushes the file's content to stable storage.
	Sync() error
	// Stat describes the open file.
	Stat() (fs.FileInfo, error)
	// Lock takes an advisory lock on the open file without waiting
	// (flock(2) with LOCK_NB): exclusive, or shared. The kernel releases
	// it when the file is closed, by Close or by the death of the
	// process. A lock another open file holds is an error wrapping
	// [ErrLocked]; a file system that keeps no locks gives one wrapping
	// [ErrNoLocks].
	Lock(exclusive bool) error
}

var (
	// ErrLocked means another open file holds a conflicting lock.
	ErrLocked = errors.New("fsys: locked by another open file")
	// ErrNoLocks means the file system keeps no locks (ENOLCK,
	// EOPNOTSUPP, ENOSYS, or a platform without flock).
	ErrNoLocks = errors.New("fsys: the file system keeps no locks")
)

// OS is the real file system of the os package: each method calls the os
// function of its name, but ReadDir and SyncDir.
type OS struct{}

var _ FS = OS{}

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

// osFile is an *os.File with [File.Lock].
type osFile struct{ *os.File }

func (f osFile) Lock(exclusive bool) error { return lock(f.File, exclusive) }

// ReadDir reads at most n entries (all when n <= 0) of the directory name.
// The directory is opened with [DirFlags]: a FIFO or device under name
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

// SyncDir opens the directory and fsyncs it, so that the creation, linking
// and removal of its entries are durable.
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
