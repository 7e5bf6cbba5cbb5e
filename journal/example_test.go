package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal"
)

// Example records an upload's overlong 429 (a valid 60 s delay) and shows
// what a later invocation sees: waiting until the retained not_before_utc,
// then elapsed, and only the never-attempted file eligible.
func Example() {
	tmp, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(tmp)
	files := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}}

	j, err := journal.Open(filepath.Join(tmp, "run"), journal.WithPlan(files))
	if err != nil {
		panic(err)
	}
	// What the transport does for the upload of a.bin that meets 429.
	u, _ := url.Parse("https://acct.file.core.windows.net/share/a.bin?sig=secret")
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	ctx := journal.WithUpload(context.Background(), "a.bin")
	received := time.Now().Add(-10 * time.Second).Unix()
	if err := j.Begin(ctx, req); err != nil {
		panic(err)
	}
	_, err = j.Backoff(ctx, req, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "r1"},
		readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: received, NotBeforeUTC: received + 60, ServerDelaySeconds: 60})
	if err != nil {
		panic(err)
	}

	// A later invocation.
	later, err := journal.OpenExisting(filepath.Join(tmp, "run"))
	if err != nil {
		panic(err)
	}
	at := time.Unix(received+45, 0)
	st := later.Status(at)
	b, _ := journal.MarshalStatus(st)
	fmt.Println(st.State, st.RemainingSeconds, len(b) > 0)
	fmt.Println(later.Admit(context.Background(), at) != nil)
	c, _ := later.PlanContinuation(files, journal.NewApproval, time.Unix(received+60, 0))
	fmt.Println(c.Status.State, c.Files[0].State, c.Files[1].State, c.Uploads())
	// Output:
	// waiting 15 true
	// true
	// elapsed unknown never-attempted [b.bin]
}

// ExampleMarshalStatus shows the JSON the status command prints.
func ExampleMarshalStatus() {
	b, _ := journal.MarshalStatus(journal.Status{State: journal.Waiting, ReceivedAtUTC: 1700000000,
		NotBeforeUTC: 1700000060, ServerDelaySeconds: 60, RemainingSeconds: 42,
		Reason: "backoff-0001.json: server restriction (retry_after overlong, server delay 60 s) until not_before_utc"})
	fmt.Println(string(b))
	b, _ = journal.MarshalStatus(journal.Status{State: journal.Clear, Reason: "no backoff entries"})
	fmt.Println(string(b))
	// Output:
	// {"file_batch":{"backoff":{"state":"waiting","received_at_utc":1700000000,"not_before_utc":1700000060,"server_delay_seconds":60,"remaining_seconds":42,"reason":"backoff-0001.json: server restriction (retry_after overlong, server delay 60 s) until not_before_utc"}}}
	// {"file_batch":{"backoff":{"state":"clear","received_at_utc":null,"not_before_utc":null,"server_delay_seconds":null,"remaining_seconds":0,"reason":"no backoff entries"}}}
}

// ExampleJournal_Review shows a staged upload (two parts, no commit) that a
// later invocation finds unknown, refuses to replay, and that an
// operator's review makes eligible again.
func ExampleJournal_Review() {
	tmp, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "run")
	files := []journal.PlannedFile{{ID: "big.bin"}}
	j, err := journal.Open(dir, journal.WithPlan(files))
	if err != nil {
		panic(err)
	}
	u, _ := url.Parse("https://acct.blob.core.windows.net/c/big.bin?comp=block&sig=secret")
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	part := journal.WithUploadPart(context.Background(), "big.bin")
	for range 2 { // two Put Block requests, each a 201; the process then dies
		if err := j.Begin(part, req); err != nil {
			panic(err)
		}
		if err := j.Complete(part, req, readrecovery.JournalOutcome{StatusCode: 201}); err != nil {
			panic(err)
		}
	}

	later, _ := journal.OpenExisting(dir)
	c, _ := later.PlanContinuation(files, journal.NewApproval, time.Now())
	fmt.Println(c.Files[0].State, c.Uploads())
	err = later.Begin(journal.WithUpload(context.Background(), "big.bin"), req)
	fmt.Println(errors.Is(err, journal.ErrReplay), errors.Is(err, readrecovery.ErrReplayRefused))

	rec, _ := later.Review(context.Background(), "big.bin", journal.DecisionReupload, "blocks never committed")
	c, _ = later.PlanContinuation(files, journal.NewApproval, time.Now())
	fmt.Println(rec.Name, c.Files[0].State, c.Files[0].Decision, c.Uploads())
	// Output:
	// unknown []
	// true true
	// review-0001.json reviewed reupload [big.bin]
}
