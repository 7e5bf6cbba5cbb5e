//go:build unix

package journal

import "syscall"

func init() { mkfifo = func(p string) error { return syscall.Mkfifo(p, 0o600) } }
