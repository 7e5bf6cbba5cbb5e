//go:build !unix

package flock

import "os"

// ReadFlags open a record to read it. Without O_NOFOLLOW and O_NONBLOCK
// here, the caller's fstat after the open is the only check.
const ReadFlags = os.O_RDONLY

// Lock reports [ErrNoLocks]: no file locks off unix.
func Lock(*os.File, bool) error { return ErrNoLocks }
