//go:build unix

package flock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A second open file of the same lock file is refused while the first
// holds it, and gets it once the first is closed.
func TestLock(t *testing.T) {
	name := filepath.Join(t.TempDir(), "lock")
	a, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := Lock(a, true); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	b, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := Lock(b, true); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock while held: %v, want ErrLocked", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Lock(b, true); err != nil {
		t.Fatalf("second lock after release: %v", err)
	}
}

// Shared locks of two open files coexist; an exclusive one is refused
// while they are held.
func TestLockShared(t *testing.T) {
	name := filepath.Join(t.TempDir(), "lock")
	var fs []*os.File
	for range 3 {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs = append(fs, f)
	}
	for i, f := range fs[:2] {
		if err := Lock(f, false); err != nil {
			t.Fatalf("shared lock %d: %v", i, err)
		}
	}
	if err := Lock(fs[2], true); !errors.Is(err, ErrLocked) {
		t.Fatalf("exclusive lock while shared ones are held: %v, want ErrLocked", err)
	}
}
