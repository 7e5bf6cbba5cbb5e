//go:build !unix

package fsys

import "os"

// ReadFlags open a file to read it. Without O_NOFOLLOW and O_NONBLOCK here,
// the journal relies on the listing's file type, checked before every open,
// and on fstat after it.
const ReadFlags = os.O_RDONLY

// DirFlags open a directory to list or fsync it; the caller's Stat says it is one first.
const DirFlags = os.O_RDONLY

// IsSymlinkRefusal reports false: this platform has no O_NOFOLLOW.
func IsSymlinkRefusal(err error) bool { return false }
