// Package journalcmd is the operator's command for a journal run: status,
// verify, plan and review, with their output and exit codes. The
// readrecovery command runs it on a run directory (`readrecovery journal`);
// rrjournal, in the azure module, on a run kept in Blob Storage. Only the
// opening of the run differs.
package journalcmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/readrecovery/readrecovery/internal/unixtime"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/journal/internal/store"
)

// Command is one command's way to reach its runs, and its words.
type Command struct {
	Prog string // starts every message ("readrecovery", "rrjournal")
	// Sub comes before a subcommand's name in messages ("journal " for
	// `readrecovery journal plan`, "" for `rrjournal plan`).
	Sub   string
	Arg   string // names the run argument in messages ("DIR", "RUN")
	Usage string // printed for --help (to stdout) and after a usage error
	// Open opens an existing run; Inspect verifies one without opening it
	// (journal.Open with journal.Existing, and journal.InspectStore).
	Open    func(ctx context.Context, run string) (*journal.Journal, error)
	Inspect func(ctx context.Context, run string) (journal.Summary, error)
	// Now is the time the commands ask about; nil means time.Now. Tests set
	// it; it is never a flag.
	Now func() time.Time
}

func (c *Command) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Run runs `status|verify|plan|review` with args. Only review writes, and
// only a review entry: a missing run is an error (exit 2), never a new one.
// ctx ends a review's wait. Exit codes: 0 clear or elapsed (status), clean
// (verify), done (plan, review); 1 findings (verify) or a refused review; 2
// a usage error, a run that is missing, unreadable or not a journal run, or
// status output that cannot be written; 3 waiting; 4 unresolved. `status
// --watch` exits with the code of its last status once the run is done or
// stopped, or when ctx ends.
func (c *Command) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, c.Usage)
		return 2
	}
	// A help word is taken where a subcommand or a flag is expected, never
	// as a flag's value (--note help) or a run's name (status help).
	if isHelp(args[0]) {
		fmt.Fprint(stdout, c.Usage)
		return 0
	}
	commands := map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
		"status": c.statusCommand, "verify": c.verify, "plan": c.plan, "review": c.review, // status: watch.go
	}
	command, ok := commands[args[0]]
	if !ok {
		return c.usageError(stderr, fmt.Sprintf("unknown %scommand %q", c.Sub, args[0]))
	}
	return command(ctx, args[1:], stdout, stderr)
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

// parse parses fset's flags and the one run argument. On false the caller returns
// code: 0 (the usage on stdout) for -h, -help or --help, else 2, a usage error.
func (c *Command) parse(fset *flag.FlagSet, args []string, stdout, stderr io.Writer) (run string, code int, ok bool) {
	pos, err := parseInterleaved(fset, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, c.Usage)
		return "", 0, false
	case err != nil:
		return "", c.usageError(stderr, fset.Name()+": "+err.Error()), false
	case len(pos) != 1 || pos[0] == "":
		return "", c.usageError(stderr, fset.Name()+" takes one "+c.Arg), false
	}
	return pos[0], 0, true
}

func (c *Command) usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "%s: %s\n%s", c.Prog, msg, c.Usage)
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
	fset.SetOutput(io.Discard) // the usage is Command.Usage
	return fset
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

func (c *Command) verify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	dir, code, ok := c.parse(newFlags(c.Sub+"verify"), args, stdout, stderr)
	if !ok {
		return code
	}
	sum, err := c.Inspect(ctx, dir)
	if err != nil {
		return c.unreadable(err, stderr)
	}
	for _, f := range sum.Findings {
		fmt.Fprintln(stdout, f.String())
	}
	// A leftover is not a finding (the interruption it comes from is
	// one of its own), but an operator sees it.
	for _, f := range sum.Leftovers {
		fmt.Fprintln(stdout, "leftover "+f.String())
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

// planJSON is what `plan --json` prints as file_batch.plan, beside the run's
// status as file_batch.backoff.
type planJSON struct {
	Complete bool           `json:"complete"` // false without plan.json: only files records name
	Counts   map[string]int `json:"counts"`
	Files    []planFile     `json:"files"`
}

// planFile is one planned file in planJSON.
type planFile struct {
	ID         string `json:"id,omitempty"` // the file's ID from --ids, when it names it
	FileDigest string `json:"file_digest"`
	Class      string `json:"class"`
	Decision   string `json:"decision,omitempty"`
	Reason     string `json:"reason"`
}

var classes = []journal.FileState{journal.FileAcked, journal.FileUnknown, journal.FileNeverAttempted, journal.FileReviewed}

func (c *Command) plan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags(c.Sub + "plan")
	asJSON := fset.Bool("json", false, "")
	idsFile := fset.String("ids", "", "")
	dir, code, ok := c.parse(fset, args, stdout, stderr)
	if !ok {
		return code
	}
	ids, err := readIDs(*idsFile)
	if err != nil {
		return c.fail(stderr, 2, c.Sub+"plan --ids: ", err)
	}
	j, err := c.Open(ctx, dir)
	if err != nil {
		return c.unreadable(err, stderr)
	}
	cont, err := j.RecordedPlan(c.now())
	if err != nil {
		return c.fail(stderr, 4, "", err)
	}
	if *asJSON {
		p := planJSON{Complete: !cont.Partial, Counts: map[string]int{}, Files: []planFile{}}
		for _, k := range classes {
			p.Counts[string(k)] = cont.Count(k)
		}
		for _, f := range cont.Files {
			p.Files = append(p.Files, planFile{ids[f.Digest], f.Digest, string(f.State), string(f.Decision), f.Reason})
		}
		// A map's keys are encoded sorted: backoff, then plan.
		b, err := json.Marshal(map[string]any{"file_batch": map[string]any{"backoff": cont.Status, "plan": p}})
		if err != nil {
			return c.fail(stderr, 2, c.Sub+"plan: ", err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return stateCode(cont.Status.State)
	}
	writeRun(stdout, cont.Status)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	head := "CLASS\tDECISION\tFILE\tREASON"
	if ids != nil {
		head = "CLASS\tDECISION\tID\tFILE\tREASON"
	}
	fmt.Fprintln(tw, head)
	named := 0
	for _, f := range cont.Files {
		d := cmp.Or(string(f.Decision), "-")
		if ids != nil {
			id := "?"
			if raw, ok := ids[f.Digest]; ok {
				id = store.EscapeName(raw)
				named++
			}
			d += "\t" + id
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.State, d, f.Digest, f.Reason)
	}
	tw.Flush()
	counts := make([]string, 0, len(classes))
	for _, k := range classes {
		counts = append(counts, fmt.Sprintf("%d %s", cont.Count(k), k))
	}
	fmt.Fprintf(stdout, "%d files: %s\n", len(cont.Files), strings.Join(counts, ", "))
	if cont.Partial {
		fmt.Fprintln(stdout, "no plan.json (a run written before it existed): never-attempted files are not listed")
	}
	if ids == nil {
		_, _ = io.WriteString(stdout, digestsOnly)
	} else {
		fmt.Fprintf(stdout, "--ids named %d of %d files (? marks a digest no line of %s names)\n", named, len(cont.Files), store.EscapeName(*idsFile))
	}
	return stateCode(cont.Status.State)
}

// digestsOnly is what plan prints without --ids: how to map digests.
const digestsOnly = "the run stores file digests, never IDs: give --ids FILE (one planned ID per line) to print each ID beside its digest; " +
	"a digest is sha256: and the hex SHA-256 of the ID's bytes (printf '%s' ID | sha256sum)\n"

// maxIDsBytes bounds the --ids file.
const maxIDsBytes = 64 << 20

// readIDs reads one planned file ID per line (a trailing "\r" dropped, empty
// lines skipped) and maps each ID's digest to it; nil for no path.
func readIDs(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIDsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxIDsBytes {
		return nil, fmt.Errorf("%s is over %d bytes", store.EscapeName(path), maxIDsBytes)
	}
	ids := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSuffix(line, "\r"); line != "" {
			ids[journal.PlannedFile{ID: line}.Digest()] = line
		}
	}
	return ids, nil
}

func (c *Command) review(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags(c.Sub + "review")
	file := fset.String("file", "", "")
	decision := fset.String("decision", "", "")
	note := fset.String("note", "", "")
	pending := fset.Bool("pending", false, "")
	marker := fset.String("marker", "", "")
	restriction := fset.String("restriction", "", "")
	notBefore := fset.Int64("not-before", 0, "")
	run, code, ok := c.parse(fset, args, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case *pending && (*file != "" || *decision != ""):
		return c.usageError(stderr, c.Sub+"review --pending takes no --file or --decision (review the file afterwards)")
	case *pending && *note == "":
		return c.usageError(stderr, c.Sub+"review --pending needs --note TEXT (why the marker's worker is dead)")
	case *pending && (*notBefore < 0 || *notBefore > unixtime.Max):
		return c.usageError(stderr, c.Sub+"review --not-before needs a Unix time in seconds")
	case *pending:
	case *marker != "":
		return c.usageError(stderr, c.Sub+"review --marker goes with --pending")
	case *restriction != "" && (*file != "" || *decision != ""):
		return c.usageError(stderr, c.Sub+"review --restriction takes no --file or --decision")
	case *restriction != "" && (*note == "" || *notBefore <= 0 || *notBefore > unixtime.Max):
		return c.usageError(stderr, c.Sub+"review --restriction ENTRY needs --not-before UNIX and --note TEXT (where the bound comes from)")
	case *restriction != "":
	case *notBefore != 0:
		return c.usageError(stderr, c.Sub+"review --not-before goes with --pending or --restriction")
	case *file == "":
		return c.usageError(stderr, c.Sub+"review needs --file ID")
	case *decision != string(journal.DecisionReupload) && *decision != string(journal.DecisionSkip):
		return c.usageError(stderr, c.Sub+"review needs --decision reupload or --decision skip")
	}
	j, err := c.Open(ctx, run)
	if err != nil {
		return c.unreadable(err, stderr)
	}
	var rec journal.ReviewRecord
	switch {
	case *pending:
		rec, err = j.ReviewPendingMarker(ctx, *marker, *note, *notBefore)
	case *restriction != "":
		rec, err = j.ReviewRestriction(ctx, *restriction, *note, *notBefore)
	default:
		rec, err = j.Review(ctx, *file, journal.Decision(*decision), *note)
	}
	switch {
	case errors.Is(err, journal.ErrRestricted):
		return c.fail(stderr, 4, "review refused: ", err) // the run's state refused it
	case err != nil:
		return c.fail(stderr, 1, "", err)
	}
	switch {
	case *pending:
		file := "no planned file"
		if rec.MarkerFileDigest != "" {
			file = "file " + rec.MarkerFileDigest + " (now unknown: review it with --file and --decision)"
		}
		fmt.Fprintf(stdout, "reviewed %s %s: %s by %s at %d (%s); %s; the run waits until not_before_utc %d\n",
			store.EscapeName(rec.Marker), rec.MarkerDigest, rec.Decision, rec.Reviewer, rec.ReviewedAtUTC, rec.Name, file, rec.NotBeforeUTC)
		if !rec.Removed {
			fmt.Fprintf(stdout, "the marker is resolved but could not be removed: the next request or review removes it\n")
		}
		return 3 // waiting
	case *restriction != "":
		fmt.Fprintf(stdout, "reviewed %s: %s by %s at %d (%s); the run waits until not_before_utc %d\n",
			store.EscapeName(*restriction), rec.Decision, rec.Reviewer, rec.ReviewedAtUTC, rec.Name, *notBefore)
		return 3 // waiting
	}
	fmt.Fprintf(stdout, "reviewed %s: %s by %s at %d (%s)\n", rec.FileDigest, rec.Decision, rec.Reviewer, rec.ReviewedAtUTC, rec.Name)
	return 0
}

func (c *Command) unreadable(err error, stderr io.Writer) int {
	switch {
	case errors.Is(err, journal.ErrNotRun):
		return c.fail(stderr, 2, "", err)
	case errors.Is(err, fs.ErrNotExist):
		return c.fail(stderr, 2, "no journal run: ", err)
	}
	return c.fail(stderr, 2, "cannot read the run: ", err)
}

// fail prints "PROG: " what and err's message on stderr and returns code. The message is
// escaped as in a Go string literal, without the quotes: it names paths and records that an
// operator or a hostile directory chose, and none of their bytes may reach the terminal raw.
func (c *Command) fail(stderr io.Writer, code int, what string, err error) int {
	q := strconv.QuoteToASCII(err.Error())
	fmt.Fprintf(stderr, "%s: %s%s\n", c.Prog, what, q[1:len(q)-1])
	return code
}
