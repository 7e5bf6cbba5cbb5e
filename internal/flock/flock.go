// Package flock is the file lock of the directory scope store and of the
// journal's directory store (journal/internal/fsys): a non-blocking
// flock(2) on an open file, released when the file is closed or its
// process dies (the kernel knows, not a clock). Off unix [Lock]
// reports [ErrNoLocks] and the store says what it does instead (the
// journal's fsys takes its own lock on Windows).
package flock

import "errors"

var (
	// ErrLocked: another open file holds the lock.
	ErrLocked = errors.New("flock: locked by another open file")
	// ErrNoLocks: the platform or file system keeps no locks.
	ErrNoLocks = errors.New("flock: the file system keeps no locks")
)
