//go:build !unix && !windows

package fsys

import "os"

// lock reports ErrNoLocks: this platform has no file locks the journal uses.
func lock(*os.File, bool) error { return ErrNoLocks }

func unlock(*os.File) {}
