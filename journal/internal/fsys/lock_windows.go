//go:build windows

package fsys

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is the one byte the lock covers, far beyond any record (a
// marker is a few KiB): a Windows lock is mandatory, and one on the bytes
// themselves would fail every other process's read of the marker.
const lockOffset = 0x7fffffff

// lock takes LockFileEx on f without waiting (LOCKFILE_FAIL_IMMEDIATELY),
// exclusive or shared; the system drops it when the handle is closed or
// the process dies, and unlock drops it first.
func lock(f *os.File, exclusive bool) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	var ferr error
	if err := control(f, func(h windows.Handle) {
		ferr = windows.LockFileEx(h, flags, 0, 1, 0, &windows.Overlapped{Offset: lockOffset})
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, windows.ERROR_LOCK_VIOLATION), errors.Is(ferr, windows.ERROR_IO_PENDING):
		return fmt.Errorf("%w: %w", ErrLocked, ferr)
	case errors.Is(ferr, windows.ERROR_NOT_SUPPORTED), errors.Is(ferr, windows.ERROR_INVALID_FUNCTION):
		return fmt.Errorf("%w: %w", ErrNoLocks, ferr)
	}
	return ferr
}

// unlock drops f's lock, if any, before its handle closes: Windows may
// release a lock left to the close a while later.
func unlock(f *os.File) {
	_ = control(f, func(h windows.Handle) {
		_ = windows.UnlockFileEx(h, 0, 1, 0, &windows.Overlapped{Offset: lockOffset})
	})
}

func control(f *os.File, fn func(windows.Handle)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(h uintptr) { fn(windows.Handle(h)) })
}
