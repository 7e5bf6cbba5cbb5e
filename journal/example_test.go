package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// Example attaches a journal to a File batch's uploads. The second upload
// meets a 429 with a valid 60 s delay: the batch stops (a wait above 30 s is
// never shortened), and a later invocation sees the run waiting until the
// retained not_before_utc, then elapsed, with only the never-attempted file
// eligible. The File service here is the bundled fake, in process.
func Example() {
	tmp, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "run")
	files := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}}
	j, err := journal.Open(dir, journal.WithPlan(files))
	if err != nil {
		panic(err)
	}

	srv := fakeserver.New()
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterOverlong(60*time.Second)), fakeserver.Nth(2))
	client := &http.Client{Transport: readrecovery.New(srv.Transport())}
	b := readrecovery.NewBudget("file batch")
	ctx := readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j)
	for _, f := range files {
		req, _ := http.NewRequestWithContext(journal.WithUpload(ctx, f.ID), http.MethodPost,
			"http://files.example/files?sig=secret", strings.NewReader("content of "+f.ID))
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, readrecovery.ErrSequenceStopped):
			fmt.Println(f.ID, "refused before the network")
		case err != nil:
			panic(err)
		default:
			resp.Body.Close()
			fmt.Println(f.ID, resp.StatusCode)
		}
	}
	fmt.Println("stop:", b.Report().Stop)

	// A later invocation, 45 s after the 429, then after the 60 s.
	later, err := journal.Open(dir, journal.Existing())
	if err != nil {
		panic(err)
	}
	st := later.Status(time.Now())
	received := time.Unix(st.ReceivedAtUTC, 0)
	fmt.Println(later.Status(received.Add(45*time.Second)).State, later.Status(received.Add(45*time.Second)).RemainingSeconds)
	c, _ := later.PlanContinuation(files, journal.NewApproval, received.Add(60*time.Second))
	fmt.Println(c.Status.State, c.Files[0].State, c.Files[1].State, c.Files[2].State, c.Uploads())
	// Output:
	// a.bin 201
	// b.bin 429
	// c.bin refused before the network
	// stop: overlong-retry-after
	// waiting 15
	// elapsed acked unknown never-attempted [c.bin]
}

// ExampleStatus_CommandJSON shows the JSON the status command prints.
func ExampleStatus_CommandJSON() {
	b, _ := journal.Status{State: journal.Waiting, ReceivedAtUTC: 1700000000,
		NotBeforeUTC: 1700000060, ServerDelaySeconds: 60, RemainingSeconds: 42,
		Reason: "backoff-0001.json: server restriction (retry_after overlong, server delay 60 s) until not_before_utc"}.CommandJSON()
	fmt.Println(string(b))
	b, _ = journal.Status{State: journal.Clear, Reason: "no backoff entries"}.CommandJSON()
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
	// What the transport hands the journal for each Put Block request of
	// big.bin (the URL only as a digest of scheme, host and path).
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:5f6c0b2a9d3e4f71a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4", Attempt: 1}
	part := journal.WithUploadPart(context.Background(), "big.bin")
	for range 2 { // two Put Block requests, each a 201; the process then dies
		if err := j.Begin(part, req); err != nil {
			panic(err)
		}
		if err := j.Complete(part, req, readrecovery.JournalOutcome{StatusCode: 201}); err != nil {
			panic(err)
		}
	}

	later, _ := journal.Open(dir, journal.Existing())
	c, _ := later.PlanContinuation(files, journal.NewApproval, time.Now())
	fmt.Println(c.Files[0].State, c.Uploads())
	err = later.Begin(journal.WithUpload(context.Background(), "big.bin"), req)
	fmt.Println(errors.Is(err, readrecovery.ErrReplayRefused), errors.Is(err, journal.ErrPlanMismatch))

	rec, _ := later.Review(context.Background(), "big.bin", journal.DecisionReupload, "blocks never committed")
	c, _ = later.PlanContinuation(files, journal.NewApproval, time.Now())
	fmt.Println(rec.Name, c.Files[0].State, c.Files[0].Decision, c.Uploads())
	// Output:
	// unknown []
	// true false
	// review-0001.json reviewed reupload [big.bin]
}
