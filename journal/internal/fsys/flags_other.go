//go:build !unix

package fsys

import (
	"io/fs"
	"os"
	"time"
)

// DirFlags open a directory to list or fsync it; the caller's Stat says it is one first.
const DirFlags = os.O_RDONLY

// IsSymlinkRefusal reports false: this platform has no O_NOFOLLOW.
func IsSymlinkRefusal(err error) bool { return false }

// ChangeTime is zero: a light listing is never kept (store.LightView).
func ChangeTime(fs.FileInfo) time.Time { return time.Time{} }
