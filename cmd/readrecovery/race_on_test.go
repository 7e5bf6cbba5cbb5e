//go:build race

package main

// raceDetector: the test binary, and so every worker process the kill
// trials start from it, runs with the race detector (slower to start).
const raceDetector = true
