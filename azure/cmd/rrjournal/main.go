// Command rrjournal shows an operator a journal run kept in Azure Blob
// Storage (SPEC shared-runs): the subcommands and exit codes of `readrecovery
// journal` for a directory, with RUN = CONTAINER/PREFIX instead of DIR.
//
// The credentials come the usual Azure way: the connection string in
// AZURE_STORAGE_CONNECTION_STRING (a shared key or a SAS; for Azurite, its
// development connection string). They are never printed: messages name
// the container URL without its query.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

const journalUsage = `usage (RUN is CONTAINER/PREFIX; AZURE_STORAGE_CONNECTION_STRING gives the account):
  rrjournal status RUN
      print {"file_batch":{"backoff":{...}}}; exit 0 clear or elapsed, 3 waiting, 4 unresolved
  rrjournal verify RUN
      print "ok" and the run's counts, or one line per finding (names escaped); exit 0 clean, 1 findings
  rrjournal plan [--json] RUN
      print every planned file's class: acked, unknown, never-attempted or reviewed; a table, or JSON
  rrjournal review RUN --file ID --decision reupload|skip [--note TEXT]
      record an operator's review of an unknown file (ID, or its sha256: digest as plan prints it);
      exit 0 recorded, 1 refused (the file is not unknown), 4 the run is unresolved
exit 2: usage error, no connection string, or RUN missing, unreadable or not a journal run
`

var journalNow = time.Now

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, journalUsage)
		return 2
	}
	for _, a := range args {
		if isHelp(a) {
			fmt.Fprint(stdout, journalUsage)
			return 0
		}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "status", "verify":
		if len(rest) != 1 || rest[0] == "" {
			return usageError(stderr, cmd+" takes one RUN")
		}
		if cmd == "status" {
			return journalStatus(ctx, rest[0], stdout, stderr)
		}
		return journalVerify(ctx, rest[0], stdout, stderr)
	case "plan":
		return journalPlan(ctx, rest, stdout, stderr)
	case "review":
		return journalReview(ctx, rest, stdout, stderr)
	default:
		return usageError(stderr, fmt.Sprintf("unknown command %q", cmd))
	}
}

// errNoCredentials: AZURE_STORAGE_CONNECTION_STRING is not set.
var errNoCredentials = errors.New("AZURE_STORAGE_CONNECTION_STRING is not set")

// storeOf returns the Blob store of RUN = CONTAINER/PREFIX.
func storeOf(runArg string) (journal.Store, error) {
	cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if cs == "" {
		return nil, errNoCredentials
	}
	name, prefix, _ := strings.Cut(runArg, "/")
	if name == "" {
		return nil, fmt.Errorf("RUN %q names no container", runArg)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	c, err := container.NewClientFromConnectionString(cs, name, blobjournal.ClientOptions())
	if err != nil {
		// The SDK's message may quote the connection string: never print it.
		return nil, errors.New("AZURE_STORAGE_CONNECTION_STRING cannot be parsed")
	}
	return blobjournal.New(c, prefix), nil
}

func openRun(ctx context.Context, runArg string) (*journal.Journal, error) {
	st, err := storeOf(runArg)
	if err != nil {
		return nil, err
	}
	return journal.OpenExistingStore(ctx, st)
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "rrjournal: %s\n%s", msg, journalUsage)
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

func journalStatus(ctx context.Context, dir string, stdout, stderr io.Writer) int {
	j, err := openRun(ctx, dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	st := j.Status(journalNow())
	b, err := journal.MarshalStatus(st)
	if err != nil {
		fmt.Fprintf(stderr, "rrjournal: journal status: %v\n", err)
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

func journalVerify(ctx context.Context, dir string, stdout, stderr io.Writer) int {
	st, err := storeOf(dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	sum, err := journal.InspectStore(ctx, st)
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

// planJSON is the JSON form of `plan --json`.
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

func journalPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("plan")
	asJSON := fset.Bool("json", false, "")
	pos, err := parseInterleaved(fset, args)
	if err != nil {
		return usageError(stderr, "plan: "+err.Error())
	}
	if len(pos) != 1 || pos[0] == "" {
		return usageError(stderr, "plan takes one DIR")
	}
	dir := pos[0]
	j, err := openRun(ctx, dir)
	if err != nil {
		return unreadable(dir, err, stderr)
	}
	c, err := j.RecordedPlan(journalNow())
	if err != nil {
		fmt.Fprintf(stderr, "rrjournal: %v\n", err)
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
			fmt.Fprintf(stderr, "rrjournal: plan: %v\n", err)
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
	fset := newFlags("review")
	file := fset.String("file", "", "")
	decision := fset.String("decision", "", "")
	note := fset.String("note", "", "")
	pos, err := parseInterleaved(fset, args)
	if err != nil {
		return usageError(stderr, "review: "+err.Error())
	}
	switch {
	case len(pos) != 1 || pos[0] == "":
		return usageError(stderr, "review takes one DIR")
	case *file == "":
		return usageError(stderr, "review needs --file ID")
	case *decision != string(journal.DecisionReupload) && *decision != string(journal.DecisionSkip):
		return usageError(stderr, "review needs --decision reupload or --decision skip")
	}
	dir := pos[0]
	j, err := openRun(ctx, dir)
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
		fmt.Fprintf(stderr, "rrjournal: review refused: %v\n", err)
		return 4
	default:
		fmt.Fprintf(stderr, "rrjournal: %v\n", err)
		return 1
	}
}

func unreadable(_ string, err error, stderr io.Writer) int {
	switch {
	case errors.Is(err, journal.ErrNotRun):
		fmt.Fprintf(stderr, "rrjournal: %v\n", err)
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stderr, "rrjournal: no journal run: %v\n", err)
	default:
		fmt.Fprintf(stderr, "rrjournal: cannot read the run: %v\n", err)
	}
	return 2
}
