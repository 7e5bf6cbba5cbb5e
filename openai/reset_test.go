package rropenai_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// TestResetUpload: a transport error (here a connection reset) stays
// openai-go's to retry, uploads included (the policy leaves transport
// errors alone): without a journal the upload whose outcome is unknown is
// sent again. With a journal that retry is refused before the network
// (replay-refused: the file is unknown), and not retried again.
func TestResetUpload(t *testing.T) {
	for _, tc := range []struct {
		journaled bool
		out       uploadOutcome
		sends     int
		stored    int
	}{
		{false, "200", 2, 1},
		{true, "refused:" + uploadOutcome(readrecovery.StopReplayRefused), 1, 0},
	} {
		t.Run(fmt.Sprintf("journaled=%t", tc.journaled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				e.srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.ConnectionReset(), fakeserver.Nth(1))
				ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("reset"))
				dir := filepath.Join(t.TempDir(), "run")
				plan := []journal.PlannedFile{{ID: "a.txt"}}
				if tc.journaled {
					j, err := journal.Open(dir, journal.WithPlan(plan))
					if err != nil {
						t.Fatal(err)
					}
					ctx = readrecovery.WithJournal(ctx, j)
				}
				_, out := upload(ctx, e.client, "a.txt")
				if out != tc.out || len(e.ledger(fakeserver.RouteOpenAIFileUpload)) != tc.sends || len(e.srv.OpenAIFiles()) != tc.stored {
					t.Fatalf("%s, the fake saw %d uploads and stored %d; want %s, %d, %d",
						out, len(e.ledger(fakeserver.RouteOpenAIFileUpload)), len(e.srv.OpenAIFiles()), tc.out, tc.sends, tc.stored)
				}
				if !tc.journaled {
					return
				}
				j, err := journal.Open(dir, journal.Existing())
				if err != nil {
					t.Fatal(err)
				}
				c, err := j.PlanContinuation(plan, journal.NewApproval, e.srv.Requests()[0].Arrived)
				if err != nil || c.Files[0].State != journal.FileUnknown || len(c.Uploads()) != 0 {
					t.Fatalf("plan %+v, %v: want a.txt unknown, nothing to upload", c, err)
				}
			})
		})
	}
}
