package integration

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// one-owner-per-429 (docs/policy.md) end to end: who retries a 429, with azblob against Azurite through
// the fakeserver proxy. readrecovery owns the 429 of a GET with a Budget
// and of every mutation; azcore keeps every other 429 (HEAD, a GET
// without a Budget) and retries it after the Retry-After.
func TestOwnership(t *testing.T) {
	az := startAzurite(t)

	for _, budget := range []bool{false, true} {
		name := "HEAD 429 without a Budget: azcore retries"
		if budget {
			name = "HEAD 429 with a Budget: azcore retries"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, az)
			path := r.blobPath("checkpoint.json")
			etag := r.seed("checkpoint.json", []byte(`{"checkpoint":1}`))
			r.script.Add(fakeserver.RouteOther, throttle1s, fakeserver.Method(http.MethodHead), fakeserver.MatchPath(path), fakeserver.Times(1))

			var tries atomic.Int32
			c := r.client(rrOptions(nil, &tries))
			ctx := context.Background()
			var b *readrecovery.Budget
			if budget {
				b = readrecovery.NewBudget("etag check " + r.container)
				ctx = readrecovery.WithBudget(ctx, b)
			}
			props, err := blobClient(c, r.container, "checkpoint.json").GetProperties(ctx, nil)
			if err != nil {
				t.Fatalf("GetProperties: %v", err)
			}
			if props.ETag == nil || string(*props.ETag) != etag {
				t.Fatalf("ETag %v, want %s", props.ETag, etag)
			}
			if n := tries.Load(); n != 2 {
				t.Fatalf("azcore made %d tries, want 2: the HEAD's 429 is azcore's to retry", n)
			}
			assertLedger(t, r, []ledgerLine{{http.MethodHead, path, 429}, {http.MethodHead, path, 200}})
			// azcore waited the Retry-After before its second try.
			r.proxy.AssertGap(t, fakeserver.RouteOther, 1, retryAfter)
			if saw := r.azuriteSaw(); len(saw) != 1 || saw[0] != (azuriteEntry{http.MethodHead, path, 200}) {
				t.Fatalf("Azurite saw %+v, want one HEAD answered 200", saw)
			}
			if b != nil {
				if rep := b.Report(); rep.Requests != 2 || rep.Waits != 0 || rep.Stop != "" {
					t.Fatalf("report %+v: readrecovery must let azcore retry a HEAD, without a wait of its own", rep)
				}
			}
		})
	}

	t.Run("GET 429 without a Budget: azcore retries", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		path := r.blobPath("checkpoint.json")
		data := []byte(`{"checkpoint":2}`)
		r.seed("checkpoint.json", data)
		r.script.Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(path), fakeserver.Times(1))

		var tries atomic.Int32
		c := r.client(rrOptions(nil, &tries))
		got, err := download(context.Background(), c, r.container, "checkpoint.json")
		if err != nil || string(got) != string(data) {
			t.Fatalf("download: %q, %v; want %q", got, err, data)
		}
		if n := tries.Load(); n != 2 {
			t.Fatalf("azcore made %d tries, want 2", n)
		}
		assertLedger(t, r, []ledgerLine{{http.MethodGet, path, 429}, {http.MethodGet, path, 200}})
		r.proxy.AssertGap(t, fakeserver.RouteBlobGet, 1, retryAfter)
	})

	for _, budget := range []bool{true, false} {
		name := "PUT 429 with a Budget: sent once"
		if !budget {
			name = "PUT 429 without a Budget: sent once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, az)
			path := r.blobPath("upload.json")
			r.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(path), fakeserver.Times(1))

			var tries atomic.Int32
			c := r.client(rrOptions(nil, &tries))
			ctx := context.Background()
			var b *readrecovery.Budget
			if budget {
				b = readrecovery.NewBudget("upload " + r.container)
				ctx = readrecovery.WithBudget(ctx, b)
			}
			_, err := c.UploadBuffer(ctx, r.container, "upload.json", []byte(`{"file":1}`), nil)
			if re := responseError(t, err); re.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("upload: status %d, want the 429", re.StatusCode)
			}
			if n := tries.Load(); n != 1 {
				t.Fatalf("azcore made %d tries, want 1", n)
			}
			assertLedger(t, r, []ledgerLine{{http.MethodPut, path, 429}})
			r.proxy.AssertNoMutationSentTwice(t)
			if saw := r.azuriteSaw(); count(saw, http.MethodPut, path) != 0 {
				t.Fatalf("Azurite saw %+v, want no PUT", saw)
			}
			if b != nil {
				if rep := b.Report(); rep.Requests != 1 || rep.Mutation == nil || rep.Mutation.StatusCode != 429 || rep.Ownership != readrecovery.Unproven {
					t.Fatalf("report %+v", rep)
				}
			}
		})
	}
}

// TestOwnershipPerCallRetryOptionsWrapped: the same per-call override
// passed through rrazure.RetryOptions keeps the ownership for that call:
// the PUT is sent once and its 429 goes back to the caller.
func TestOwnershipPerCallRetryOptionsWrapped(t *testing.T) {
	r := newRig(t, startAzurite(t))
	path := r.blobPath("upload.json")
	r.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(path), fakeserver.Times(1))

	var tries atomic.Int32
	c := r.client(rrOptions(nil, &tries))
	ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("upload "+r.container))
	ctx = policy.WithRetryOptions(ctx, rrazure.RetryOptions(policy.RetryOptions{StatusCodes: []int{http.StatusTooManyRequests}}))
	_, err := c.UploadBuffer(ctx, r.container, "upload.json", []byte(`{"file":3}`), nil)
	if re := responseError(t, err); re.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("upload: status %d, want the 429", re.StatusCode)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("azcore made %d tries, want 1", n)
	}
	assertLedger(t, r, []ledgerLine{{http.MethodPut, path, 429}})
}

// ledgerLine is one request the proxy saw: method, path, status answered.
type ledgerLine struct {
	Method, Path string
	Status       int
}

// assertLedger checks the proxy's ledger of r's container, in order.
func assertLedger(t *testing.T, r *rig, want []ledgerLine) {
	t.Helper()
	led := r.ledger()
	got := make([]ledgerLine, len(led))
	for i, q := range led {
		got[i] = ledgerLine{q.Method, q.Path, q.Status}
	}
	if len(got) != len(want) {
		t.Fatalf("the proxy saw %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("the proxy saw %+v, want %+v", got, want)
		}
	}
}

// blobClient returns the client of one blob of c.
func blobClient(c *azblob.Client, container, name string) *blob.Client {
	return c.ServiceClient().NewContainerClient(container).NewBlobClient(name)
}
