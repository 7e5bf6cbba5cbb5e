package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Finding is one problem of a run directory, found by [InspectStore] or by the
// verification [Open] performs. Any finding makes the run unresolved.
type Finding struct {
	// File is the file's name inside the run directory, or "." for the
	// directory itself.
	File string
	// Problem says what is wrong, in a few words.
	Problem string
}

// String returns "file: problem", the line `readrecovery journal verify`
// prints. A file name that is not plain printable ASCII (a newline, an
// escape sequence, a quote, a space, anything else) is printed quoted with
// Go escapes, so that no name can forge a line or reach a terminal raw.
func (f Finding) String() string { return EscapeName(f.File) + ": " + f.Problem }

// escapeName returns name as it is when it is plain printable ASCII
// without spaces, quotes or backslashes, else strconv.QuoteToASCII(name).
func EscapeName(name string) string {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool {
		return c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '\''
	}) {
		return strconv.QuoteToASCII(name)
	}
	return name
}

// Findings are the findings of a scan; a read adds its problem to them.
type Findings []Finding

// Add adds a finding; to nil Findings (a read that keeps none) it adds nothing.
func (f *Findings) Add(file, format string, args ...any) {
	if f != nil {
		*f = append(*f, Finding{File: file, Problem: fmt.Sprintf(format, args...)})
	}
}

// ErrNotRun means a directory holds files but none of the names a journal
// writes (run.json, backoff-*, receipt-*, …): it is not a journal run, and
// the journal neither reports it as a run nor writes into it.
var ErrNotRun = errors.New("journal: not a journal run (no run manifest)")
