//go:build unix

package fsys

import (
	"errors"
	"os"
	"syscall"
)

// ReadFlags are the flags with which the journal opens a file to read it:
// read-only, never following a symbolic link (the open fails with ELOOP),
// and without blocking, so that opening a FIFO or a device returns at once
// and the caller's fstat can refuse it as not a regular file.
const ReadFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// DirFlags are the flags with which the journal opens a directory to list
// or fsync it: a path that is not a directory (a FIFO, a device, a file)
// fails at once with ENOTDIR, and nothing waits on a FIFO's writer.
const DirFlags = os.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NONBLOCK

// IsSymlinkRefusal reports whether err is the refusal of an open with
// O_NOFOLLOW of a symbolic link.
func IsSymlinkRefusal(err error) bool { return errors.Is(err, syscall.ELOOP) }
