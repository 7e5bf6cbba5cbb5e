//go:build unix

package fsys

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/readrecovery/readrecovery/internal/flock"
)

// DirFlags open a directory to list or fsync it: anything else (a FIFO, a
// device, a file) fails at once with ENOTDIR, and nothing waits on a FIFO.
const DirFlags = os.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NONBLOCK

// IsSymlinkRefusal reports whether err is an O_NOFOLLOW open's refusal of
// a symbolic link.
func IsSymlinkRefusal(err error) bool { return errors.Is(err, syscall.ELOOP) }

// lock is internal/flock's: flock(2) without waiting.
func lock(f *os.File, exclusive bool) error { return flock.Lock(f, exclusive) }

// unlock does nothing: closing the file drops its flock at once.
func unlock(*os.File) {}

// ChangeTime is the status change time (ctime) of info from Stat: a write,
// a rename or a chmod in a directory changes it.
func ChangeTime(info fs.FileInfo) time.Time {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return time.Time{}
}
