package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/readrecovery/readrecovery/journal"
)

const journalUsage = `usage:
  readrecovery journal status DIR   print {"file_batch":{"backoff":{...}}}; exit 0 clear/elapsed, 3 waiting, 4 unresolved
  readrecovery journal verify DIR   print one line per finding; exit 0 only when clean, 1 otherwise
exit 2: usage error, or DIR missing, empty or unreadable
`

// journalNow is the time the status command asks about. Tests replace it;
// it is not a flag (SPEC R41).
var journalNow = time.Now

// runJournal runs `readrecovery journal status|verify DIR`. It only reads:
// a missing directory is an error (exit 2), never a new run.
func runJournal(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, journalUsage)
		return 0
	}
	if len(args) != 2 || args[1] == "" {
		fmt.Fprint(stderr, journalUsage)
		return 2
	}
	dir := args[1]
	switch args[0] {
	case "status":
		return journalStatus(dir, stdout, stderr)
	case "verify":
		return journalVerify(dir, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "readrecovery: journal: unknown command %q\n%s", args[0], journalUsage)
		return 2
	}
}

func journalStatus(dir string, stdout, stderr io.Writer) int {
	j, err := journal.OpenExisting(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	st := j.Status(journalNow())
	b, err := journal.MarshalStatus(st)
	if err != nil {
		fmt.Fprintf(stderr, "readrecovery: journal status: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "%s\n", b)
	switch st.State {
	case journal.Clear, journal.Elapsed:
		return 0
	case journal.Waiting:
		return 3
	default:
		return 4
	}
}

func journalVerify(dir string, stdout, stderr io.Writer) int {
	findings, err := journal.Verify(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	for _, f := range findings {
		fmt.Fprintln(stdout, f.String())
	}
	if len(findings) > 0 {
		return 1
	}
	return 0
}

func unreadable(dir string, err error, stderr io.Writer) int {
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stderr, "readrecovery: journal: no run in %s: %v\n", dir, err)
	} else {
		fmt.Fprintf(stderr, "readrecovery: journal: cannot read %s: %v\n", dir, err)
	}
	return 2
}
