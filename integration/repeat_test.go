package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// repeatWorld is what one row of TestRepeatPathsReachTheServerOnce gets:
// for an azcore row, a rig (Azurite behind the fakeserver proxy, whose
// script throttles the blob's first PUT); for a net/http row, the fake
// alone with the same rule. tries counts the tries that reached the layer
// under test: azcore's tries (a per-retry policy), or the requests handed
// to the readrecovery transport.
type repeatWorld struct {
	rig   *rig               // azcore rows
	fake  *fakeserver.Server // net/http rows
	url   string             // the blob's URL (net/http rows)
	path  string             // the blob's path as the server sees it
	tries atomic.Int32
	// journalDir is the run directory of a row that journals, "" otherwise.
	journalDir string
	budget     *readrecovery.Budget
}

// counting is a RoundTripper above readrecovery that counts the requests
// handed to it.
type counting struct {
	n    *atomic.Int32
	next http.RoundTripper
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// client returns a plain http.Client over readrecovery over go-cleanhttp,
// counting the requests handed to readrecovery.
func (w *repeatWorld) client() *http.Client {
	return &http.Client{Transport: counting{n: &w.tries, next: readrecovery.New(nil)}}
}

// withBudget returns ctx with a new Budget the row's report comes from.
func (w *repeatWorld) withBudget(ctx context.Context, name string) context.Context {
	w.budget = readrecovery.NewBudget(name)
	return readrecovery.WithBudget(ctx, w.budget)
}

// putOnce sends one PUT of body with ctx and closes the answer: the
// caller's first send, answered 429 by the script.
func putOnce(t *testing.T, c *http.Client, req *http.Request) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("first PUT: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first PUT: status %d, want the scripted 429", resp.StatusCode)
	}
}

// sendAgain sends req and returns the error; a response is closed and
// reported as no error (the repeat reached the network or was answered).
func sendAgain(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	return err
}

var repeatBody = []byte(`{"file":"report.json","bytes":42}`)

// TestRepeatPathsReachTheServerOnce is the table of the ways a throttled
// mutation can be sent again by whatever retries above the transport
// (docs/policy.md, "repeat-guard"): in each, the server sees exactly one
// PUT, the repeat is refused before the network with a NonRetriable error
// matching ErrRequestRefused that carries the original 429's status and
// request ID, and a sequence the repeat belongs to goes on.
func TestRepeatPathsReachTheServerOnce(t *testing.T) {
	perCall429 := policy.RetryOptions{StatusCodes: []int{http.StatusTooManyRequests}}
	rows := []struct {
		name  string
		azure bool
		run   func(t *testing.T, w *repeatWorld) error
	}{
		{"azblob, per-call StatusCodes [429], no Budget", true, func(t *testing.T, w *repeatWorld) error {
			c := w.rig.client(rrOptions(nil, &w.tries))
			ctx := policy.WithRetryOptions(context.Background(), perCall429)
			_, err := c.UploadBuffer(ctx, w.rig.container, "upload.json", repeatBody, nil)
			return err
		}},
		{"azblob, per-call StatusCodes [429], only a journal", true, func(t *testing.T, w *repeatWorld) error {
			w.journalDir = filepath.Join(t.TempDir(), "run")
			j, err := journal.Open(w.journalDir)
			if err != nil {
				t.Fatal(err)
			}
			c := w.rig.client(rrOptions(nil, &w.tries))
			ctx := readrecovery.WithJournal(context.Background(), j)
			ctx = policy.WithRetryOptions(ctx, perCall429)
			_, err = c.UploadBuffer(ctx, w.rig.container, "upload.json", repeatBody, nil)
			return err
		}},
		{"azblob, per-call StatusCodes [429], a Budget", true, func(t *testing.T, w *repeatWorld) error {
			c := w.rig.client(rrOptions(nil, &w.tries))
			ctx := w.withBudget(context.Background(), "upload")
			ctx = policy.WithRetryOptions(ctx, perCall429)
			_, err := c.UploadBuffer(ctx, w.rig.container, "upload.json", repeatBody, nil)
			return err
		}},
		{"go-retryablehttp over readrecovery, a Budget", false, func(t *testing.T, w *repeatWorld) error {
			return retryablePut(t, w, w.withBudget(context.Background(), "retryablehttp"))
		}},
		{"the same *http.Request again, a Budget", false, func(t *testing.T, w *repeatWorld) error {
			c := w.client()
			req, err := http.NewRequestWithContext(w.withBudget(context.Background(), "loop"), http.MethodPut, w.url, bytes.NewReader(repeatBody))
			if err != nil {
				t.Fatal(err)
			}
			putOnce(t, c, req)
			if req.Body, err = req.GetBody(); err != nil {
				t.Fatal(err)
			}
			return sendAgain(c, req)
		}},
		{"a new request, same method, URL and body bytes, a Budget", false, func(t *testing.T, w *repeatWorld) error {
			c := w.client()
			ctx := w.withBudget(context.Background(), "rebuilt")
			first, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url, bytes.NewReader(repeatBody))
			if err != nil {
				t.Fatal(err)
			}
			putOnce(t, c, first)
			again, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url, bytes.NewReader(bytes.Clone(repeatBody)))
			if err != nil {
				t.Fatal(err)
			}
			return sendAgain(c, again)
		}},
		{"x-ms-client-request-id under a lower-case key, a Budget", false, func(t *testing.T, w *repeatWorld) error {
			c := w.client()
			ctx := w.withBudget(context.Background(), "client-request-id")
			first, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url, bytes.NewReader(repeatBody))
			if err != nil {
				t.Fatal(err)
			}
			first.Header["x-ms-client-request-id"] = []string{"3f2a9c1e-upload-7"}
			putOnce(t, c, first)
			// Other bytes: only the client request ID makes it the same
			// operation.
			again, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url, bytes.NewReader([]byte(`{"file":"report.json","bytes":43}`)))
			if err != nil {
				t.Fatal(err)
			}
			again.Header["x-ms-client-request-id"] = []string{"3f2a9c1e-upload-7"}
			return sendAgain(c, again)
		}},
		{"go-retryablehttp over readrecovery, no Budget, WithOperation", false, func(t *testing.T, w *repeatWorld) error {
			return retryablePut(t, w, readrecovery.WithOperation(context.Background()))
		}},
		{"the same *http.Request again, no Budget, WithOperation", false, func(t *testing.T, w *repeatWorld) error {
			c := w.client()
			req, err := http.NewRequestWithContext(readrecovery.WithOperation(context.Background()), http.MethodPut, w.url, bytes.NewReader(repeatBody))
			if err != nil {
				t.Fatal(err)
			}
			putOnce(t, c, req)
			if req.Body, err = req.GetBody(); err != nil {
				t.Fatal(err)
			}
			return sendAgain(c, req)
		}},
	}

	var az *azurite
	for _, row := range rows {
		if row.azure && az == nil {
			az = startAzurite(t)
		}
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			w := &repeatWorld{}
			var ledger func() []fakeserver.Request
			if row.azure {
				w.rig = newRig(t, az)
				w.path = w.rig.blobPath("upload.json")
				w.rig.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(w.path), fakeserver.Times(1))
				ledger = w.rig.ledger
			} else {
				script := &fakeserver.Script{}
				w.fake = fakeserver.New(fakeserver.WithScript(script))
				base, err := w.fake.Start()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.fake.Close() })
				w.path = "/reports/upload.json"
				w.url = base + w.path
				script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(w.path), fakeserver.Times(1))
				ledger = w.fake.Requests
			}

			err := row.run(t, w)

			var puts []fakeserver.Request
			for _, q := range ledger() {
				if q.Method == http.MethodPut && q.Path == w.path {
					puts = append(puts, q)
				}
			}
			t.Logf("server saw %d PUT(s); %d tries reached the layer under test; err: %v", len(puts), w.tries.Load(), err)
			if len(puts) == 0 || puts[0].Status != http.StatusTooManyRequests {
				t.Fatalf("the server saw %+v, want the first PUT answered 429", puts)
			}
			if len(puts) != 1 {
				t.Errorf("the server saw %d PUTs, want exactly 1: the throttled PUT was sent again", len(puts))
			}
			if n := w.tries.Load(); n < 2 {
				t.Errorf("%d tries reached the layer under test, want at least 2: the repeat did not happen", n)
			}
			var se *readrecovery.StopError
			switch {
			case !errors.Is(err, readrecovery.ErrRequestRefused) || !errors.As(err, &se):
				t.Errorf("err = %v, want the repeat refused (ErrRequestRefused)", err)
			case se.StatusCode != http.StatusTooManyRequests || se.RequestID != puts[0].RequestID:
				t.Errorf("the refusal carries status %d, request ID %q; want the original 429's: 429, %q", se.StatusCode, se.RequestID, puts[0].RequestID)
			case !errors.As(err, new(interface{ NonRetriable() })):
				t.Errorf("the refusal %v is not NonRetriable", err)
			}
			if w.budget != nil {
				if rep := w.budget.Report(); rep.Stop != "" || rep.Requests != 1 {
					t.Errorf("report: stop %q, %d requests; want the sequence running after one PUT", rep.Stop, rep.Requests)
				}
			}
			if w.journalDir != "" {
				sum, err := journal.InspectStore(context.Background(), journal.DirStore(w.journalDir))
				if err != nil {
					t.Fatal(err)
				}
				if sum.Entries != 1 {
					t.Errorf("the journal holds %d backoff entries, want 1: one per 429 the server sent", sum.Entries)
				}
			}
			if row.azure {
				if saw := w.rig.azuriteSaw(); count(saw, http.MethodPut, w.path) != 0 {
					t.Errorf("Azurite saw %+v, want no PUT: the one PUT was throttled", saw)
				}
			}
		})
	}
}

// A plain net/http caller without a Budget: the 429 comes back untouched;
// the same *http.Request handed to the transport again (a loop of the
// caller's, go-retryablehttp) is refused before the network with the 429's
// evidence; a new request the caller builds is the caller's decision and
// is sent.
func TestPlainNetHTTPWithoutBudget(t *testing.T) {
	script := &fakeserver.Script{}
	fake := fakeserver.New(fakeserver.WithScript(script))
	base, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	const path = "/reports/upload.json"
	script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(path), fakeserver.Times(1))

	c := &http.Client{Transport: readrecovery.New(nil)}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, base+path, bytes.NewReader(repeatBody))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	first := fake.Requests()[0]
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("x-ms-request-id") != first.RequestID {
		t.Fatalf("first PUT: status %d, Retry-After %q, request ID %q; want the server's 429 untouched (1, %q)",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("x-ms-request-id"), first.RequestID)
	}
	if req.Body, err = req.GetBody(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(req)
	var se *readrecovery.StopError
	if !errors.Is(err, readrecovery.ErrRequestRefused) || !errors.As(err, &se) || se.StatusCode != 429 || se.RequestID != first.RequestID {
		t.Fatalf("the same request again: %v; want it refused with the 429's status and request ID %q", err, first.RequestID)
	}
	if n := fake.Count(fakeserver.RouteBlobPut, http.MethodPut); n != 1 {
		t.Fatalf("the server saw %d PUTs after the refusal, want 1", n)
	}
	again, err := http.NewRequestWithContext(context.Background(), http.MethodPut, base+path, bytes.NewReader(repeatBody))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = c.Do(again)
	if err != nil {
		t.Fatalf("the caller's new request: %v, want it sent", err)
	}
	resp.Body.Close()
	if n := fake.Count(fakeserver.RouteBlobPut, http.MethodPut); resp.StatusCode != http.StatusCreated || n != 2 {
		t.Fatalf("new request: status %d, the server saw %d PUTs; want 201 and 2", resp.StatusCode, n)
	}
}

// retryablePut sends the throttled PUT through go-retryablehttp (v0.7.8)
// over readrecovery with ctx. Two re-sends: the first after the 429's
// Retry-After (1 s), the second after the refusal, which the default
// policy retries like any transport error.
func retryablePut(t *testing.T, w *repeatWorld, ctx context.Context) error {
	t.Helper()
	rc := retryablehttp.NewClient()
	rc.HTTPClient = w.client()
	rc.Logger = nil
	rc.RetryMax = 2
	rc.RetryWaitMin, rc.RetryWaitMax = time.Millisecond, 10*time.Millisecond
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPut, w.url, repeatBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	return err
}
