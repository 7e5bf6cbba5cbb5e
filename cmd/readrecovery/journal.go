package main

import (
	"context"
	"io"
	"time"

	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/journal/journalcmd"
)

const journalUsage = `usage:
  readrecovery journal status [--text] [--watch [--interval 2s]] DIR
      print {"file_batch":{"backoff":{...},"files":{...},"shards":[...]}}: the status, the planned files
      per class (acked, in-flight, never-attempted, unknown, reviewed) and one line per shard (its marker
      live or dead, the worker's host and pid); --text prints the same as text; --watch redraws that text
      every --interval (at least 100ms: a shorter one is raised to it) until the run is done (nothing in
      flight, nothing never attempted) or unresolved, or until SIGINT; exit 0 clear or elapsed, 3 waiting,
      4 unresolved (--watch: of its last status)
  readrecovery journal verify DIR
      print "ok" and the run's counts, or one line per finding (names escaped); exit 0 clean, 1 findings
  readrecovery journal plan [--json] [--ids FILE] DIR
      print every planned file's class: acked, unknown, never-attempted or reviewed; a table,
      or JSON; --ids FILE (one planned ID per line) prints each file's ID beside its digest;
      exit 0 clear or elapsed, 3 waiting, 4 unresolved
  readrecovery journal review DIR --file ID --decision reupload|skip [--note TEXT]
      record an operator's review of an unknown file (ID, or its sha256: digest as plan prints it);
      exit 0 recorded, 1 refused (the file is not unknown), 4 the run is unresolved
  readrecovery journal review DIR --pending [--marker shard-KK/pending-request.json] --note TEXT [--not-before UNIX]
      resolve a dead pending-request.json (a killed worker: no lock or lease holds it); keeps
      every record, makes the marker's file unknown, and the run waits 30 s or until --not-before;
      in a parallel run --marker names the shard's marker (without it: the only dead one); exit 3
      recorded (the run waits), 1 refused (no marker, or its worker is live), 4 other findings
  readrecovery journal review DIR --restriction ENTRY --not-before UNIX --note TEXT
      bound a backoff entry whose restriction has no timing (a Retry-After beyond year 9999, an
      oversized field): the run waits until --not-before (at least 30 s from now); keeps every record;
      in a parallel run ENTRY names its shard (shard-02/backoff-0003.json);
      exit 3 recorded, 1 refused, 4 the run has other findings
exit 2: usage error, DIR missing, empty, unreadable or not a journal run, or output not written
`

// journalNow is the time the journal commands ask about. Tests replace it;
// it is not a flag (docs/policy.md: clock-is-internal).
var journalNow = time.Now

// runJournal runs `readrecovery journal ...` without cancellation (the demo
// uses it).
func runJournal(args []string, stdout, stderr io.Writer) int {
	return runJournalContext(context.Background(), args, stdout, stderr)
}

// runJournalContext runs `readrecovery journal status|verify|plan|review`
// on a run directory (journalcmd has the subcommands, shared with the azure
// module's rrjournal for runs in Blob Storage). ctx ends a review's wait.
func runJournalContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := journalcmd.Command{
		Prog: "readrecovery", Sub: "journal ", Arg: "DIR", Usage: journalUsage,
		Open: func(_ context.Context, dir string) (*journal.Journal, error) {
			return journal.Open(dir, journal.Existing())
		},
		Inspect: func(ctx context.Context, dir string) (journal.Summary, error) {
			return journal.InspectStore(ctx, journal.DirStore(dir))
		},
		Now: func() time.Time { return journalNow() },
	}
	return c.Run(ctx, args, stdout, stderr)
}
