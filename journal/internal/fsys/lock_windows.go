//go:build windows

package fsys

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// lockAt is the one byte the lock covers, far beyond any record (a marker is
// a few KiB): a Windows lock is mandatory, and one on the bytes themselves
// would fail every other process's read of the marker.
var lockAt = windows.Overlapped{Offset: 0x7fffffff}

// lock takes LockFileEx on f without waiting (LOCKFILE_FAIL_IMMEDIATELY),
// exclusive or shared; Windows drops it when the handle is closed or the
// process dies, and unlock drops it first.
func lock(f *os.File, exclusive bool) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	err := control(f, func(h uintptr) error { o := lockAt; return windows.LockFileEx(windows.Handle(h), flags, 0, 1, 0, &o) })
	switch {
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	case errors.Is(err, windows.ERROR_NOT_SUPPORTED), errors.Is(err, windows.ERROR_INVALID_FUNCTION):
		return fmt.Errorf("%w: %w", ErrNoLocks, err)
	}
	return err
}

// unlock drops f's lock, if any, before its handle closes: Windows may
// release a lock left to the close a while later.
func unlock(f *os.File) {
	_ = control(f, func(h uintptr) error { o := lockAt; return windows.UnlockFileEx(windows.Handle(h), 0, 1, 0, &o) })
}

// control runs fn on f's raw handle (Fd would put the file in
// blocking mode) and returns its error, or the error of reaching it.
func control(f *os.File, fn func(fd uintptr) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(fd) }); err != nil {
		return err
	}
	return ferr
}
