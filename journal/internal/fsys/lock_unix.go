//go:build unix

package fsys

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lock takes flock(2) on f without waiting, through its raw descriptor
// (Fd would put the file in blocking mode).
func lock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = syscall.Flock(int(fd), how)
		for ferr == syscall.EINTR {
			ferr = syscall.Flock(int(fd), how)
		}
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		return fmt.Errorf("%w: %w", ErrLocked, ferr)
	case errors.Is(ferr, syscall.ENOLCK), errors.Is(ferr, syscall.EOPNOTSUPP), errors.Is(ferr, syscall.ENOSYS), errors.Is(ferr, syscall.EINVAL):
		return fmt.Errorf("%w: %w", ErrNoLocks, ferr)
	}
	return ferr
}

// unlock does nothing: closing the file drops its flock at once.
func unlock(*os.File) {}
