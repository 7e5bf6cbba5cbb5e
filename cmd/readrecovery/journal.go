package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/readrecovery/readrecovery/journal"
)

const journalUsage = `usage:
  readrecovery journal status DIR
      print {"file_batch":{"backoff":{...}}}; exit 0 clear or elapsed, 3 waiting, 4 unresolved
  readrecovery journal verify DIR
      print "ok" and the run's counts, or one line per finding (names escaped); exit 0 clean, 1 findings
  readrecovery journal plan [--json] DIR
      print every planned file's class: acked, unknown, never-attempted or reviewed; a table, or JSON
  readrecovery journal review DIR --file ID --decision reupload|skip [--note TEXT]
      record an operator's review of an unknown file (ID, or its sha256: digest as plan prints it);
      exit 0 recorded, 1 refused (the file is not unknown), 4 the run is unresolved
exit 2: usage error, or DIR missing, empty, unreadable or not a journal run
`

// journalNow is the time the journal commands ask about. Tests replace it;
// it is not a flag (SPEC clock-is-internal).
var journalNow = time.Now

// runJournal runs `readrecovery journal ...` without cancellation (the demo
// uses it).
func runJournal(args []string, stdout, stderr io.Writer) int {
	return runJournalContext(context.Background(), args, stdout, stderr)
}

// runJournalContext runs `readrecovery journal status|verify|plan|review`.
// Only review writes, and only a review entry: a missing directory is an
// error (exit 2), never a new run. ctx ends a review's wait.
func runJournalContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, journalUsage)
		return 2
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, journalUsage)
		return 0
	}
	for _, a := range args[1:] {
		if isHelp(a) {
			fmt.Fprint(stdout, journalUsage)
			return 0
		}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "status", "verify":
		if len(rest) != 1 || rest[0] == "" {
			return usageError(stderr, "journal "+cmd+" takes one DIR")
		}
		if cmd == "status" {
			return journalStatus(rest[0], stdout, stderr)
		}
		return journalVerify(rest[0], stdout, stderr)
	case "plan":
		return journalPlan(rest, stdout, stderr)
	case "review":
		return journalReview(ctx, rest, stdout, stderr)
	default:
		return usageError(stderr, fmt.Sprintf("unknown journal command %q", cmd))
	}
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "readrecovery: %s\n%s", msg, journalUsage)
	return 2
}

// parseInterleaved parses flags that may come before or after the
// positional arguments (`review DIR --file ID`), which flag.Parse alone
// does not.
func parseInterleaved(fset *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			return nil, err
		}
		args = fset.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlags(name string) *flag.FlagSet {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(io.Discard) // the usage is journalUsage
	return fset
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
	return stateCode(st.State)
}

func stateCode(s journal.State) int {
	switch s {
	case journal.Clear, journal.Elapsed:
		return 0
	case journal.Waiting:
		return 3
	default:
		return 4
	}
}

func journalVerify(dir string, stdout, stderr io.Writer) int {
	sum, err := journal.Inspect(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	for _, f := range sum.Findings {
		fmt.Fprintln(stdout, f.String())
	}
	if len(sum.Findings) > 0 {
		return 1
	}
	planned := "no plan.json (a run written before it existed)"
	if sum.PlannedFiles >= 0 {
		planned = fmt.Sprintf("%d planned files", sum.PlannedFiles)
	}
	fmt.Fprintf(stdout, "ok: %s, %d backoff entries, %d receipts, %d part receipts, %d reviews\n",
		planned, sum.Entries, sum.Receipts, sum.Parts, sum.Reviews)
	return 0
}

// planJSON is the JSON form of `journal plan --json`.
type planJSON struct {
	FileBatch struct {
		Backoff journal.Status `json:"backoff"`
		Plan    struct {
			// Complete is false for a run without plan.json: only the
			// files that records name are listed.
			Complete bool           `json:"complete"`
			Counts   map[string]int `json:"counts"`
			Files    []planFileJSON `json:"files"`
		} `json:"plan"`
	} `json:"file_batch"`
}

type planFileJSON struct {
	FileDigest string `json:"file_digest"`
	Class      string `json:"class"`
	Decision   string `json:"decision,omitempty"`
	Reason     string `json:"reason"`
}

var classes = []journal.FileState{journal.FileAcked, journal.FileUnknown, journal.FileNeverAttempted, journal.FileReviewed}

func journalPlan(args []string, stdout, stderr io.Writer) int {
	fset := newFlags("journal plan")
	asJSON := fset.Bool("json", false, "")
	pos, err := parseInterleaved(fset, args)
	if err != nil {
		return usageError(stderr, "journal plan: "+err.Error())
	}
	if len(pos) != 1 || pos[0] == "" {
		return usageError(stderr, "journal plan takes one DIR")
	}
	dir := pos[0]
	j, err := journal.OpenExisting(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	c, err := j.RecordedPlan(journalNow())
	if err != nil {
		fmt.Fprintf(stderr, "readrecovery: %v\n", err)
		return 4
	}
	if *asJSON {
		var out planJSON
		out.FileBatch.Backoff = c.Status
		p := &out.FileBatch.Plan
		p.Complete, p.Counts, p.Files = !c.Partial, map[string]int{}, []planFileJSON{}
		for _, k := range classes {
			p.Counts[string(k)] = c.Count(k)
		}
		for _, f := range c.Files {
			p.Files = append(p.Files, planFileJSON{f.Digest, string(f.State), string(f.Decision), f.Reason})
		}
		b, err := json.Marshal(out)
		if err != nil {
			fmt.Fprintf(stderr, "readrecovery: journal plan: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	st := c.Status
	fmt.Fprintf(stdout, "run: %s", st.State)
	if st.State == journal.Waiting {
		fmt.Fprintf(stdout, " (%d s remaining, until not_before_utc %d)", st.RemainingSeconds, st.NotBeforeUTC)
	}
	fmt.Fprintf(stdout, ": %s\n", st.Reason)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tDECISION\tFILE\tREASON")
	for _, f := range c.Files {
		d := string(f.Decision)
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.State, d, f.Digest, f.Reason)
	}
	tw.Flush()
	counts := make([]string, 0, len(classes))
	for _, k := range classes {
		counts = append(counts, fmt.Sprintf("%d %s", c.Count(k), k))
	}
	fmt.Fprintf(stdout, "%d files: %s\n", len(c.Files), strings.Join(counts, ", "))
	if c.Partial {
		fmt.Fprintln(stdout, "no plan.json (a run written before it existed): never-attempted files are not listed")
	}
	return 0
}

func journalReview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("journal review")
	file := fset.String("file", "", "")
	decision := fset.String("decision", "", "")
	note := fset.String("note", "", "")
	pos, err := parseInterleaved(fset, args)
	if err != nil {
		return usageError(stderr, "journal review: "+err.Error())
	}
	switch {
	case len(pos) != 1 || pos[0] == "":
		return usageError(stderr, "journal review takes one DIR")
	case *file == "":
		return usageError(stderr, "journal review needs --file ID")
	case *decision != string(journal.DecisionReupload) && *decision != string(journal.DecisionSkip):
		return usageError(stderr, "journal review needs --decision reupload or --decision skip")
	}
	dir := pos[0]
	j, err := journal.OpenExisting(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	rec, err := j.Review(ctx, *file, journal.Decision(*decision), *note)
	var re *journal.RestrictedError
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "reviewed %s: %s by %s at %d (%s)\n", rec.FileDigest, rec.Decision, rec.Reviewer, rec.ReviewedAtUTC, rec.Name)
		return 0
	case errors.As(err, &re):
		fmt.Fprintf(stderr, "readrecovery: review refused: %v\n", err)
		return 4
	default:
		fmt.Fprintf(stderr, "readrecovery: %v\n", err)
		return 1
	}
}

func unreadable(_ string, err error, stderr io.Writer) int {
	switch {
	case errors.Is(err, journal.ErrNotRun):
		fmt.Fprintf(stderr, "readrecovery: %v\n", err)
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stderr, "readrecovery: no journal run: %v\n", err)
	default:
		fmt.Fprintf(stderr, "readrecovery: cannot read the run: %v\n", err)
	}
	return 2
}
