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
func TestTryLock(t *testing.T) {
	name := filepath.Join(t.TempDir(), "lock")
	a, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := TryLock(a); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	b, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := TryLock(b); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock while held: %v, want ErrLocked", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(b); err != nil {
		t.Fatalf("second lock after release: %v", err)
	}
}
