package integration

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

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
			journaledGET(b, ctx, j, get, ok)
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

// storeCounter counts the requests of the journal store's client by kind.
type storeCounter struct {
	next          http.RoundTripper
	lists, others atomic.Int64
}

func (c *storeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("comp") == "list" {
		c.lists.Add(1)
	} else {
		c.others.Add(1)
	}
	return c.next.RoundTrip(req)
}

// BenchmarkJournaledRequestRunSize is the Blob store's cost of one
// journaled request (Admit, Begin, Complete of a GET) in a run that already
// holds the receipts of uploaded files (0 and 200: the end of a 200-file
// batch), with the store requests it takes: list/op (listing pages) and
// other/op (reads, creates, deletes). It shows what limits a run's files
// per second on one store: every check lists the whole run.
func BenchmarkJournaledRequestRunSize(b *testing.B) {
	az := startAzurite(b)
	get := readrecovery.JournalRequest{Method: "GET", URLDigest: "sha256:" + strings.Repeat("cd", 32), Attempt: 1}
	ok := readrecovery.JournalOutcome{StatusCode: 200, RequestID: "r"}
	for _, uploaded := range []int{0, 200} {
		b.Run(fmt.Sprintf("receipts=%d", uploaded), func(b *testing.B) {
			cont := "bench-" + randomHex(4)
			cred, err := azblobSharedKey(azuriteKey)
			if err != nil {
				b.Fatal(err)
			}
			counter := &storeCounter{next: http.DefaultTransport}
			o := blobjournal.ClientOptions()
			o.Transport = &http.Client{Transport: counter}
			c, err := container.NewClientWithSharedKeyCredential(az.URL+"/"+azuriteAccount+"/"+cont, cred, o)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Create(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
			plan := workerPlan(uploaded)
			ctx := context.Background()
			j, err := journal.OpenStore(ctx, blobjournal.New(c, "run/"), journal.WithPlan(plan))
			if err != nil {
				b.Fatal(err)
			}
			put := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:" + strings.Repeat("ab", 32), Attempt: 1}
			for _, f := range plan {
				uctx := journal.WithUpload(ctx, f.ID)
				if err := j.Begin(uctx, put); err != nil {
					b.Fatal(err)
				}
				if err := j.Complete(uctx, put, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r"}); err != nil {
					b.Fatal(err)
				}
			}
			counter.lists.Store(0)
			counter.others.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				journaledGET(b, ctx, j, get, ok)
			}
			b.ReportMetric(float64(counter.lists.Load())/float64(b.N), "list/op")
			b.ReportMetric(float64(counter.others.Load())/float64(b.N), "other/op")
		})
	}
}

// BenchmarkJournaledUpload is the journal's cost per file of a 200-file
// batch on a Blob-backed run (Azurite on loopback, no proxy, no data sent:
// Begin and Complete of each file's upload with a 201), for a run without
// journal.WithParallel and a parallel run of 4 shards, with 1, 2 and 4
// workers (goroutines, each with its own Journal, as processes would
// have). One op is one batch on a fresh run; files/s is the metric to
// compare (with benchstat), list/file the store's listings per file.
func BenchmarkJournaledUpload(b *testing.B) {
	az := startAzurite(b)
	const files = 200
	put := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:" + strings.Repeat("ab", 32), Attempt: 1}
	for _, run := range []struct {
		name string
		opts []journal.Option
	}{{"single", nil}, {"parallel-4", []journal.Option{journal.WithParallel(4)}}} {
		for _, workers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("run=%s/workers=%d", run.name, workers), func(b *testing.B) {
				cred, err := azblobSharedKey(azuriteKey)
				if err != nil {
					b.Fatal(err)
				}
				counter := &storeCounter{next: http.DefaultTransport}
				o := blobjournal.ClientOptions()
				o.Transport = &http.Client{Transport: counter}
				cont := "bench-" + randomHex(4)
				c, err := container.NewClientWithSharedKeyCredential(az.URL+"/"+azuriteAccount+"/"+cont, cred, o)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Create(context.Background(), nil); err != nil {
					b.Fatal(err)
				}
				plan := workerPlan(files)
				var spent time.Duration
				var lists int64
				batches := 0
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					ctx := context.Background()
					prefix := fmt.Sprintf("run-%d/", batches)
					if _, err := journal.OpenStore(ctx, blobjournal.New(c, prefix), append(run.opts, journal.WithPlan(plan))...); err != nil {
						b.Fatal(err)
					}
					js := make([]*journal.Journal, workers)
					for i := range js {
						if js[i], err = journal.OpenStore(ctx, blobjournal.New(c, prefix), journal.Existing(), journal.WithPendingWait(30*time.Second)); err != nil {
							b.Fatal(err)
						}
					}
					lists -= counter.lists.Load()
					b.StartTimer()
					start := time.Now()
					var wg sync.WaitGroup
					for i := range workers {
						wg.Go(func() {
							j := js[i]
							for k, f := range plan {
								// Split as blobworker -share does: by
								// shard in a parallel run, else by index.
								if n := j.Shard(f.ID) - 1; (j.Parallel() > 0 && n%workers != i) || (j.Parallel() == 0 && k%workers != i) {
									continue
								}
								uctx := journal.WithUpload(ctx, f.ID)
								if err := j.Begin(uctx, put); err != nil {
									b.Error(err)
									return
								}
								if err := j.Complete(uctx, put, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r"}); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					spent += time.Since(start)
					b.StopTimer()
					lists += counter.lists.Load()
					sum, err := journal.InspectStore(ctx, blobjournal.New(c, prefix))
					if err != nil || sum.Receipts != files || len(sum.Findings) != 0 {
						b.Fatalf("batch %d: %+v, %v; want %d receipts, no finding", batches, sum, err, files)
					}
					batches++
					b.StartTimer()
				}
				b.ReportMetric(float64(files*batches)/spent.Seconds(), "files/s")
				b.ReportMetric(float64(lists)/float64(files*batches), "list/file")
			})
		}
	}
}

// journaledGET is one journaled request of the benchmarks: Admit, Begin and
// Complete of get with outcome ok.
func journaledGET(b *testing.B, ctx context.Context, j *journal.Journal, get readrecovery.JournalRequest, ok readrecovery.JournalOutcome) {
	b.Helper()
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
