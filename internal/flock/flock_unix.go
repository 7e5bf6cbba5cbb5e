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

// Lock takes flock(2) on f without waiting, exclusive or shared, through
// its raw descriptor (Fd would put the file in blocking mode). Held by
// another open file: an error wrapping [ErrLocked]; a file system that
// keeps no locks: [ErrNoLocks].
func Lock(f *os.File, exclusive bool) error {
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
