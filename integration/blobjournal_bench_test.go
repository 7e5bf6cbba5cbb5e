package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// BenchmarkJournaledRequest is the journal's overhead per journaled
// request (Admit, Begin, Complete of a 200 GET: one listing per check, the
// marker created and deleted), for a run in a local directory and in Blob
// Storage (Azurite on loopback, straight, no proxy).
func BenchmarkJournaledRequest(b *testing.B) {
	get := readrecovery.JournalRequest{Method: "GET", URLDigest: "sha256:" + strings.Repeat("cd", 32), Attempt: 1}
	ok := readrecovery.JournalOutcome{StatusCode: 200, RequestID: "r"}
	bench := func(b *testing.B, j *journal.Journal) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := j.Admit(ctx, time.Now()); err != nil {
				b.Fatal(err)
			}
			if err := j.Begin(ctx, get); err != nil {
				b.Fatal(err)
			}
			if err := j.Complete(ctx, get, ok); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("dir", func(b *testing.B) {
		j, err := journal.Open(filepath.Join(b.TempDir(), "run"), journal.WithPlan(workerPlan(200)))
		if err != nil {
			b.Fatal(err)
		}
		bench(b, j)
	})
	b.Run("blob-azurite", func(b *testing.B) {
		az := startAzurite(b)
		cont := "bench-" + randomHex(4)
		c := storeClient(b, az.URL, cont)
		if _, err := c.Create(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
		j, err := journal.OpenStore(context.Background(), blobjournal.New(c, fmt.Sprintf("run-%s/", randomHex(4))), journal.WithPlan(workerPlan(200)))
		if err != nil {
			b.Fatal(err)
		}
		bench(b, j)
	})
}
