package rropenai_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/otelattr"
)

// uploadOutcome is what one Files.New of the batch came to.
type uploadOutcome string

// upload sends one journaled Files.New of plan file id.
func upload(ctx context.Context, c openai.Client, id string) (*openai.FileObject, uploadOutcome) {
	f, err := c.Files.New(journal.WithUpload(ctx, id), openai.FileNewParams{
		File:    openai.File(strings.NewReader("content of "+id), id, "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
	var se *readrecovery.StopError
	switch {
	case err == nil:
		return f, "200"
	case statusOf(err) != 0:
		return nil, uploadOutcome(fmt.Sprint(statusOf(err)))
	case errors.As(err, &se) && errors.Is(err, readrecovery.ErrRequestRefused):
		return nil, uploadOutcome("refused:" + se.Reason)
	case errors.As(err, &se):
		return nil, uploadOutcome("stopped:" + se.Reason)
	}
	return nil, uploadOutcome("error: " + err.Error())
}

// TestJournaledUploadBatch: a batch of 20 journaled Files.New meets
// retry-after-ms 60000 on its 8th upload. The batch stops there (a wait
// above 30 s is never shortened, and openai-go does not retry the upload);
// the 12 later uploads fail before the network. The next invocation, 10 s
// later, finds the run waiting and sends nothing; after the 60 s, the
// continuation uploads only the 12 never-attempted files: the throttled one
// is unknown (never replayed), the 7 acknowledged ones are never sent
// again. The continuation's vector-store file batch is journaled too and
// polled to completion. Every file reached the fake's store once.
func TestJournaledUploadBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		dir := filepath.Join(t.TempDir(), "run")
		var plan []journal.PlannedFile
		var ids []string
		for i := range 20 {
			id := fmt.Sprintf("doc-%02d.txt", i+1)
			plan = append(plan, journal.PlannedFile{ID: id})
			ids = append(ids, id)
		}
		e.srv.Script().Add(fakeserver.RouteOpenAIFileUpload,
			fakeserver.Throttle(fakeserver.RetryAfterSeconds(60)).WithRetryAfterMs(60000, false), fakeserver.Nth(8))
		bg := context.Background()
		t0 := time.Now()

		// Invocation 1.
		j1, err := journal.Open(dir, journal.WithPlan(plan))
		if err != nil {
			t.Fatal(err)
		}
		b1 := readrecovery.NewBudget("upload batch")
		ctx := readrecovery.WithJournal(readrecovery.WithBudget(bg, b1), j1)
		var got []uploadOutcome
		for _, id := range ids {
			_, out := upload(ctx, e.client, id)
			got = append(got, out)
		}
		want := slices.Repeat([]uploadOutcome{"200"}, 7)
		want = append(want, "429")
		want = append(want, slices.Repeat([]uploadOutcome{"stopped:" + uploadOutcome(readrecovery.StopOverlong)}, 12)...)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("invocation 1: %v\nwant %v", got, want)
		}
		if d := time.Since(t0); d != 0 {
			t.Fatalf("invocation 1 took %v: nothing may wait or back off", d)
		}
		ledger1 := e.ledger(fakeserver.RouteOpenAIFileUpload)
		if s := statuses(ledger1); s != "200 200 200 200 200 200 200 429" {
			t.Fatalf("invocation 1: the fake answered %s", s)
		}
		if r := b1.Report(); r.Stop != readrecovery.StopOverlong || r.Requests != 8 || r.Waits != 0 {
			t.Fatalf("invocation 1 report %v", r)
		}

		// Invocation 2, 10 s later: waiting, nothing sent.
		time.Sleep(10 * time.Second)
		j2, err := journal.Open(dir, journal.Existing())
		if err != nil {
			t.Fatal(err)
		}
		st := j2.Status(time.Now())
		if st.State != journal.Waiting || st.ServerDelaySeconds != 60 || st.RemainingSeconds != 50 ||
			st.NotBeforeUTC != ledger1[7].Arrived.Unix()+60 {
			t.Fatalf("invocation 2 status %+v, want waiting 50 s more", st)
		}
		c2, err := j2.PlanContinuation(plan, journal.NewApproval, time.Now())
		if err != nil || len(c2.Uploads()) != 0 {
			t.Fatalf("invocation 2 plan: %v uploads, %v; want none while waiting", c2.Uploads(), err)
		}
		b2 := readrecovery.NewBudget("upload batch, too early")
		if _, out := upload(readrecovery.WithJournal(readrecovery.WithBudget(bg, b2), j2), e.client, "doc-09.txt"); out != "stopped:"+uploadOutcome(readrecovery.StopJournalRestricted) {
			t.Fatalf("invocation 2 upload: %s, want journal-restricted before the network", out)
		}
		if n := len(e.ledger(fakeserver.RouteOpenAIFileUpload)); n != 8 {
			t.Fatalf("invocation 2 sent: the fake saw %d uploads", n)
		}

		// Invocation 3, after the 60 s: the continuation.
		time.Sleep(51 * time.Second)
		j3, err := journal.Open(dir, journal.Existing())
		if err != nil {
			t.Fatal(err)
		}
		c3, err := j3.PlanContinuation(plan, journal.NewApproval, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if c3.Status.State != journal.Elapsed || fmt.Sprint(c3.Uploads()) != fmt.Sprint(ids[8:]) ||
			c3.Count(journal.FileAcked) != 7 || c3.Count(journal.FileUnknown) != 1 || c3.Files[7].State != journal.FileUnknown {
			t.Fatalf("invocation 3 plan: %s, uploads %v, acked %d, unknown %d", c3.Status.State, c3.Uploads(), c3.Count(journal.FileAcked), c3.Count(journal.FileUnknown))
		}
		b3 := readrecovery.NewBudget("upload batch, continued")
		ctx3 := readrecovery.WithJournal(readrecovery.WithBudget(bg, b3), j3)
		for _, id := range []string{"doc-08.txt", "doc-01.txt"} { // unknown and acked: refused before the network
			if _, out := upload(ctx3, e.client, id); out != "refused:"+uploadOutcome(readrecovery.StopReplayRefused) {
				t.Fatalf("invocation 3, %s: %s, want replay-refused", id, out)
			}
		}
		var fileIDs []string
		for _, id := range c3.Uploads() {
			f, out := upload(ctx3, e.client, id)
			if out != "200" {
				t.Fatalf("invocation 3, %s: %s", id, out)
			}
			fileIDs = append(fileIDs, f.ID)
		}
		ledger3 := e.ledger(fakeserver.RouteOpenAIFileUpload)
		if len(ledger3) != 20 || statuses(ledger3[8:]) != strings.TrimSpace(strings.Repeat("200 ", 12)) {
			t.Fatalf("the fake saw %d uploads: %s", len(ledger3), statuses(ledger3))
		}
		var stored []string
		for _, f := range e.srv.OpenAIFiles() {
			stored = append(stored, f.Filename)
		}
		if fmt.Sprint(stored) != fmt.Sprint(slices.Concat(ids[:7], ids[8:])) {
			t.Fatalf("the fake stored %v", stored)
		}

		// The continuation's vector-store file batch, journaled, polled
		// until completed (openai-poll-after-ms: 1000).
		for _, f := range e.srv.OpenAIFiles()[:7] {
			fileIDs = append(fileIDs, f.ID)
		}
		pollStart := time.Now()
		batch, err := e.client.VectorStores.FileBatches.NewAndPoll(ctx3, "vs_docs",
			openai.VectorStoreFileBatchNewParams{FileIDs: fileIDs}, 0)
		if err != nil || batch.Status != openai.VectorStoreFileBatchStatusCompleted || batch.FileCounts.Completed != 19 {
			t.Fatalf("batch %+v, %v", batch, err)
		}
		if d := time.Since(pollStart); d != time.Second {
			t.Fatalf("polling took %v, want the server's 1 s", d)
		}
		if n, m := len(e.ledger(fakeserver.RouteOpenAIBatchCreate)), len(e.ledger(fakeserver.RouteOpenAIBatchGet)); n != 1 || m != 2 {
			t.Fatalf("batch create %d, polls %d; want 1, 2", n, m)
		}
		if r := b3.Report(); r.Stop != "" || r.Requests != 15 || len(r.Mutations) != 13 {
			t.Fatalf("invocation 3 report %v", r)
		}
		if s := j3.Status(time.Now()); s.State != journal.Elapsed {
			t.Fatalf("final status %+v", s)
		}
		if !e.srv.AssertNoMutationSentTwice(t) {
			t.Fatal("a mutation was sent twice")
		}

		// The run on disk: the one backoff entry (doc-08's 429) and a
		// receipt per acknowledged upload; the batch create and the polls
		// leave none (a mutation without WithUpload gets a marker and, on
		// 429, an entry, never a receipt); no marker is left.
		names, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, n := range names {
			base := filepath.Base(n)
			kind, _, _ := strings.Cut(base, "-")
			kinds[kind]++
		}
		if fmt.Sprint(kinds) != "map[backoff:1 head:1 plan.json:1 receipt:19 run.json:1]" {
			t.Fatalf("the run holds %v", kinds)
		}

		// Spans and logs: invocation 1's stop, invocation 2's refusal
		// before the network; the replay refusals of invocation 3 are not
		// stops. No wait anywhere.
		var events []string
		for _, s := range e.spans.GetSpans() {
			for _, ev := range s.Events {
				if ev.Name != otelattr.StopEventName {
					continue
				}
				var reason, seq, n string
				for _, a := range ev.Attributes {
					switch a.Key {
					case otelattr.StopReason:
						reason = a.Value.AsString()
					case otelattr.SequenceName:
						seq = a.Value.AsString()
					case otelattr.SequenceRequests:
						n = a.Value.String()
					}
				}
				events = append(events, s.Name+" "+seq+" "+reason+" "+n)
			}
		}
		if want := "[readrecovery.stop upload batch overlong-retry-after 8 readrecovery.stop upload batch, too early journal-restricted 0]"; fmt.Sprint(events) != want {
			t.Fatalf("stop events %v\nwant %s", events, want)
		}
		if n := len(named(e.spans.GetSpans(), otelattr.WaitSpanName)); n != 0 {
			t.Fatalf("%d wait spans, want none", n)
		}
		var logs []string
		for _, l := range e.logs.records(t) {
			logs = append(logs, fmt.Sprint(l["level"], " ", l["msg"], " ", l["sequence"], " ", l["reason"]))
		}
		if want := "[WARN readrecovery: sequence stopped upload batch overlong-retry-after WARN readrecovery: sequence stopped upload batch, too early journal-restricted]"; fmt.Sprint(logs) != want {
			t.Fatalf("logs %v\nwant %s", logs, want)
		}
		assertNoSecret(t, e)
	})
}
