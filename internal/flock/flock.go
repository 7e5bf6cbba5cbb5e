// Package flock is the directory scope store's file lock: a non-blocking
// flock(2) on an open file, released when the file is closed or its
// process dies (the kernel knows, not a clock). Off unix there is no lock:
// [TryLock] reports [ErrNoLocks] and the store says what it does instead.
package flock

import "errors"

var (
	// ErrLocked: another open file holds the lock.
	ErrLocked = errors.New("flock: locked by another open file")
	// ErrNoLocks: the platform or file system keeps no locks.
	ErrNoLocks = errors.New("flock: the file system keeps no locks")
)
