package main

import (
	"fmt"
	"io"
)

// runJournal is not written yet.
func runJournal(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "readrecovery: journal: not implemented yet")
	return 1
}
