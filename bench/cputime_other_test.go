//go:build !unix

package bench

// processCPU is 0 where getrusage is missing: cpu-us/page reads 0.
func processCPU() int64 { return 0 }
