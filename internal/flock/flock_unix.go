//go:build unix

package flock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ReadFlags open a record to read it without following a symbolic link
// and without blocking on a FIFO or a device (the caller's fstat then
// refuses what is not a regular file).
const ReadFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// TryLock takes an exclusive flock(2) on f without waiting, through its
// raw descriptor (Fd would put the file in blocking mode). Held by
// another open file: an error wrapping [ErrLocked]; a file system that
// keeps no locks: [ErrNoLocks].
func TryLock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
		for ferr == syscall.EINTR {
			ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
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
