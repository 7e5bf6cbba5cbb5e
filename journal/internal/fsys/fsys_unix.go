//go:build unix

package fsys

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ReadFlags open a file to read it without following a symbolic link (the
// open fails with ELOOP) and without blocking, so that a FIFO or a device
// opens at once and the caller's fstat refuses it as not a regular file.
const ReadFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// DirFlags open a directory to list or fsync it: anything else (a FIFO, a
// device, a file) fails at once with ENOTDIR, and nothing waits on a FIFO.
const DirFlags = os.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NONBLOCK

// IsSymlinkRefusal reports whether err is an O_NOFOLLOW open's refusal of
// a symbolic link.
func IsSymlinkRefusal(err error) bool { return errors.Is(err, syscall.ELOOP) }

// lock takes flock(2) on f without waiting, through its raw descriptor
// (Fd would put the file in blocking mode).
func lock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	ferr := control(f, func(fd uintptr) error {
		err := syscall.Flock(int(fd), how)
		for err == syscall.EINTR {
			err = syscall.Flock(int(fd), how)
		}
		return err
	})
	switch {
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		return fmt.Errorf("%w: %w", ErrLocked, ferr)
	case errors.Is(ferr, syscall.ENOLCK), errors.Is(ferr, syscall.EOPNOTSUPP), errors.Is(ferr, syscall.ENOSYS), errors.Is(ferr, syscall.EINVAL):
		return fmt.Errorf("%w: %w", ErrNoLocks, ferr)
	}
	return ferr
}

// unlock does nothing: closing the file drops its flock at once.
func unlock(*os.File) {}
