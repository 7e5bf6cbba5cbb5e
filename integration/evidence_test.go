package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// TestAzcoreRetriedPutIsOneMutation: azcore's own tries of one upload are
// one operation, so the report holds one mutation with its attempts in
// order; the 201 of the third try makes it owned (docs/policy.md,
// "ownership-needs-ack"). The proxy answers the first two PUTs 503;
// azcore retries 503 (it is azcore's, not readrecovery's), and Azurite
// stores the third.
func TestAzcoreRetriedPutIsOneMutation(t *testing.T) {
	r := newRig(t, startAzurite(t))
	path := r.blobPath("upload.json")
	r.script.Add(fakeserver.RouteBlobPut, fakeserver.Status(http.StatusServiceUnavailable), fakeserver.MatchPath(path), fakeserver.Times(2))

	o := policy.ClientOptions{Retry: policy.RetryOptions{RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}}
	rrazure.Apply(&o, readrecovery.New(nil))
	c := r.client(o)
	b := readrecovery.NewBudget("upload " + r.container)
	if _, err := c.UploadBuffer(readrecovery.WithBudget(context.Background(), b), r.container, "upload.json", []byte(`{"file":4}`), nil); err != nil {
		t.Fatalf("upload: %v", err)
	}
	assertLedger(t, r, []ledgerLine{{http.MethodPut, path, 503}, {http.MethodPut, path, 503}, {http.MethodPut, path, 201}})

	// Report.Mutations lists every attempt; the three tries are attempts 1,
	// 2 and 3 of the sequence's one mutation (Request 1), and the 201 of the
	// last makes the mutation owned, each attempt's entry included.
	rep := b.Report()
	want := []struct {
		status int
		acked  bool
	}{{503, false}, {503, false}, {201, true}}
	if len(rep.Mutations) != len(want) {
		t.Fatalf("report: %d mutation attempts %+v, want 3", len(rep.Mutations), rep.Mutations)
	}
	for i, m := range rep.Mutations {
		if m.Request != 1 || m.Attempt != i+1 || m.Method != http.MethodPut || m.StatusCode != want[i].status ||
			m.Acked != want[i].acked || m.Ownership != readrecovery.Owned {
			t.Fatalf("attempt %d: %+v, want mutation 1, attempt %d, PUT %d (acked %t), owned", i+1, m, i+1, want[i].status, want[i].acked)
		}
	}
	if rep.Mutation == nil || rep.Mutation.Attempt != 3 || !rep.Mutation.Acked {
		t.Fatalf("report: Mutation %+v, want the first mutation's latest outcome: attempt 3, acked", rep.Mutation)
	}
	if rep.Ownership != readrecovery.Owned || rep.Requests != 3 {
		t.Fatalf("report: ownership %q, %d requests; want owned, 3", rep.Ownership, rep.Requests)
	}
}

// TestDownloadCutByTotal: a large download through azblob whose body
// trickles past the sequence's total is cut off there, and the error says
// so whoever reads it: errors.Is(err, ErrSequenceStopped), reason
// total-exhausted, and the report records the stop; every per-try context
// azcore derived reports the same stop as its cause (docs/policy.md,
// "total-cuts-off").
func TestDownloadCutByTotal(t *testing.T) {
	az := startAzurite(t)
	const total = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		download func(ctx context.Context, c *azblob.Client, container string) error
	}{
		{"DownloadStream", func(ctx context.Context, c *azblob.Client, container string) error {
			resp, err := c.DownloadStream(ctx, container, "large.bin", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			return err
		}},
		{"DownloadBuffer, 4 ranges in parallel", func(ctx context.Context, c *azblob.Client, container string) error {
			_, err := c.DownloadBuffer(ctx, container, "large.bin", make([]byte, 256<<10), &blob.DownloadBufferOptions{BlockSize: 64 << 10, Concurrency: 4})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, az)
			data := make([]byte, 256<<10)
			_, _ = rand.Read(data)
			r.seed("large.bin", data)
			// 16 KiB chunks, 100 ms before each: 1.6 s for the whole blob,
			// 400 ms for each 64 KiB range (after azblob's first range).
			r.script.Add(fakeserver.RouteBlobGet, fakeserver.SlowBody(16<<10, 100*time.Millisecond), fakeserver.MatchPath(r.blobPath("large.bin")))

			var mu sync.Mutex
			var tries []context.Context
			o := rrOptions(nil, nil)
			o.PerRetryPolicies = append(o.PerRetryPolicies, policyFunc(func(req *policy.Request) (*http.Response, error) {
				mu.Lock()
				tries = append(tries, req.Raw().Context())
				mu.Unlock()
				return req.Next()
			}))
			c := r.client(o)
			b := readrecovery.NewBudget("large download", readrecovery.MaxTotal(total))
			start := time.Now()
			err := tc.download(readrecovery.WithBudget(context.Background(), b), c, r.container)
			took := time.Since(start)

			var se *readrecovery.StopError
			if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) || se.Reason != readrecovery.StopTotalExhausted {
				t.Fatalf("err = %v (%T), want a total-exhausted stop", err, err)
			}
			if rep := b.Report(); rep.Stop != readrecovery.StopTotalExhausted {
				t.Fatalf("report: stop %q, want %s", rep.Stop, readrecovery.StopTotalExhausted)
			}
			if took > total+time.Second {
				t.Fatalf("the download took %v, the total is %v: not cut off", took, total)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(tries) == 0 {
				t.Fatal("no azcore try was seen")
			}
			for i, ctx := range tries {
				cause := context.Cause(ctx)
				if !errors.As(cause, &se) || se.Reason != readrecovery.StopTotalExhausted {
					t.Errorf("azcore try %d: context.Cause = %v, want the total-exhausted stop", i+1, cause)
				}
			}
		})
	}
}

type policyFunc func(*policy.Request) (*http.Response, error)

func (f policyFunc) Do(req *policy.Request) (*http.Response, error) { return f(req) }
