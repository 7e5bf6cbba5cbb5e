// Command rrjournal shows an operator a journal run kept in Azure Blob
// Storage (docs/policy.md: shared-runs): the subcommands and exit codes of `readrecovery
// journal` for a directory, with RUN = CONTAINER/PREFIX instead of DIR.
//
// The credentials come the usual Azure way: the connection string in
// AZURE_STORAGE_CONNECTION_STRING (a shared key or a SAS; for Azurite, its
// development connection string). They are never printed: messages name
// the container URL without its query.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/journal/journalcmd"
)

const journalUsage = `usage (RUN is CONTAINER/PREFIX; AZURE_STORAGE_CONNECTION_STRING gives the account):
  rrjournal status [--text] [--watch [--interval 2s]] RUN
      print {"file_batch":{"backoff":{...},"files":{...},"shards":[...]}}: the status, the planned files
      per class and one line per shard (its marker live or dead, the worker's host and pid); --text prints
      the same as text; --watch redraws that text every --interval (at least 100ms: a shorter one is
      raised to it) until the run is done or unresolved; exit 0 clear or elapsed, 3 waiting,
      4 unresolved (--watch: of its last status)
  rrjournal verify RUN
      print "ok" and the run's counts, or one line per finding (names escaped); exit 0 clean, 1 findings
  rrjournal plan [--json] [--ids FILE] RUN
      print every planned file's class: acked, unknown, never-attempted or reviewed; a table,
      or JSON; --ids FILE (one planned ID per line) prints each file's ID beside its digest;
      exit 0 clear or elapsed, 3 waiting, 4 unresolved
  rrjournal review RUN --file ID --decision reupload|skip [--note TEXT]
      record an operator's review of an unknown file (ID, or its sha256: digest as plan prints it);
      exit 0 recorded, 1 refused (the file is not unknown), 4 the run is unresolved
  rrjournal review RUN --pending [--marker shard-KK/pending-request.json] --note TEXT [--not-before UNIX]
      resolve a dead pending-request.json (a killed worker: its lease expired, within 15 s); keeps
      every record, makes the marker's file unknown, and the run waits 30 s or until --not-before;
      in a parallel run --marker names the shard's marker (without it: the only dead one); exit 3
      recorded (the run waits), 1 refused (no marker, or its worker is live), 4 other findings
  rrjournal review RUN --restriction ENTRY --not-before UNIX --note TEXT
      bound a backoff entry whose restriction has no timing (a Retry-After beyond year 9999, an
      oversized field): the run waits until --not-before (at least 30 s from now); keeps every record;
      in a parallel run ENTRY names its shard (shard-02/backoff-0003.json);
      exit 3 recorded, 1 refused, 4 the run has other findings
exit 2: usage error, no connection string, RUN missing, unreadable or not a journal run, or output not written
`

var journalNow = time.Now

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs `rrjournal status|verify|plan|review RUN` (journalcmd has the
// subcommands, shared with `readrecovery journal` for a directory).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := journalcmd.Command{
		Prog: "rrjournal", Arg: "RUN", Usage: journalUsage, Open: openRun,
		Inspect: func(ctx context.Context, runArg string) (journal.Summary, error) {
			st, err := storeOf(runArg)
			if err != nil {
				return journal.Summary{}, err
			}
			return journal.InspectStore(ctx, st)
		},
		Now: func() time.Time { return journalNow() },
	}
	return c.Run(ctx, args, stdout, stderr)
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
	return journal.OpenStore(ctx, st, journal.Existing())
}
