//go:build unix

package bench

import "syscall"

// processCPU is the CPU time (user and system) the process has used so far,
// in nanoseconds: the client's and the loopback server's alike. On a
// machine shared with other work a scenario's wall time moves by tens of
// percent between runs, its CPU time far less.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
