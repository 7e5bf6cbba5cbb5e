package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// The Blob store under the fault table (shared-runs, persistence-failure-is-terminal): each conditional
// request of a journaled request — the marker's create, the backoff
// entry's and the receipt's create, the marker's conditional delete — fails
// once with 412, 409, 429, 500 or a connection reset, answered by the proxy
// in front of Azurite. A failed create of the marker sends nothing; every
// other failure is a persistence failure that leaves the run unresolved
// for a fresh worker (the marker stays): never clear after a 429.
func TestBlobJournalStoreFaults(t *testing.T) {
	az := startAzurite(t)
	r := newRig(t, az)
	faults := []struct {
		name  string
		fault fakeserver.Fault
	}{
		{"412", fakeserver.Status(412)},
		{"409", fakeserver.Status(409)},
		{"429", fakeserver.Throttle(fakeserver.RetryAfterSeconds(1))},
		{"500", fakeserver.Status(500)},
		{"reset", fakeserver.ConnectionReset()},
	}
	steps := []struct {
		name   string
		method string
		object string // the journal name the fault hits (a prefix)
	}{
		{"marker create", "PUT", "pending-request.json"},
		{"entry create", "PUT", "backoff-0001.json"},
		{"receipt create", "PUT", "receipt-"},
		{"marker delete", "DELETE", "pending-request.json"},
	}
	put := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:" + strings.Repeat("ab", 32), Attempt: 1}
	n := 0
	for _, step := range steps {
		for _, f := range faults {
			n++
			prefix := fmt.Sprintf("faults-%02d/", n)
			t.Run(step.name+"/"+f.name, func(t *testing.T) {
				r.script.Add(fakeserver.RouteAny, f.fault, fakeserver.Method(step.method), fakeserver.Nth(1),
					fakeserver.MatchPath(r.blobPath(prefix+step.object)))
				st := blobjournal.New(storeClient(t, r.proxyURL, r.container), prefix)
				j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(3)))
				if err != nil {
					t.Fatal(err)
				}
				ctx := journal.WithUpload(context.Background(), "f-000")
				now := time.Now()
				var stepErr error
				sent := false
				if stepErr = j.Begin(ctx, put); stepErr == nil {
					sent = true
					if step.name == "receipt create" {
						stepErr = j.Complete(ctx, put, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "up-1"})
					} else {
						_, stepErr = j.Backoff(ctx, put, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "up-1"},
							readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 60},
							&readrecovery.RetryAfterTiming{ReceivedAtUTC: now.Unix(), NotBeforeUTC: now.Unix() + 60, ServerDelaySeconds: 60})
					}
				}
				if stepErr == nil {
					t.Fatal("the injected fault did not fail the step")
				}
				fresh, err := journal.OpenStore(context.Background(), blobjournal.New(storeClient(t, az.URL, r.container), prefix), journal.Existing())
				if err != nil {
					t.Fatal(err)
				}
				got := fresh.Status(time.Now())
				var re *journal.RestrictedError
				switch {
				case step.name == "marker create":
					// Nothing was sent; nothing is recorded (the proxy
					// answered without forwarding).
					if sent {
						t.Fatal("Begin succeeded")
					}
					// 412 to If-None-Match: * says the marker exists: another
					// worker's; a 409 without BlobAlreadyExists is a failure.
					wantPending := f.name == "412"
					if errors.As(stepErr, &re) != wantPending || errors.Is(stepErr, journal.ErrPending) != wantPending {
						t.Fatalf("Begin = %v; want a pending restriction only for 412", stepErr)
					}
					if got.State != journal.Clear {
						t.Fatalf("fresh status %+v, want clear (nothing sent, nothing written)", got)
					}
				default:
					if errors.As(stepErr, &re) {
						t.Fatalf("%s = %v, a restriction; want a persistence failure", step.name, stepErr)
					}
					if got.State != journal.Unresolved || !errors.Is(fresh.Admit(context.Background(), time.Now()), journal.ErrPending) {
						t.Fatalf("fresh status %+v; want unresolved by the marker that stays", got)
					}
				}
				if f.name == "429" {
					// The store's own 429 is a failure with its request ID.
					var be *blobjournal.Error
					if !errors.As(stepErr, &be) || be.StatusCode != 429 {
						t.Fatalf("err = %v, want a *blobjournal.Error with status 429", stepErr)
					}
					var id string
					for _, q := range r.ledger() {
						if q.Status == 429 && strings.HasPrefix(q.Path, r.blobPath(prefix)) {
							id = q.RequestID
						}
					}
					if id == "" || be.RequestID != id || !strings.Contains(stepErr.Error(), id) {
						t.Fatalf("error %q names request ID %q; the proxy answered %q", stepErr, be.RequestID, id)
					}
				}
			})
		}
	}
}

// shared-runs through the transport: the store's 429 on the marker is a
// persistence failure of the upload's sequence, before the upload is sent,
// and the store's requests are not the sequence's (its report counts none).
func TestBlobJournalStore429StopsUpload(t *testing.T) {
	az := startAzurite(t)
	r := newRig(t, az)
	prefix := "r60/"
	r.script.Add(fakeserver.RouteAny, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Method("PUT"),
		fakeserver.MatchPath(r.blobPath(prefix+"pending-request.json")), fakeserver.Always())
	j, err := journal.OpenStore(context.Background(), blobjournal.New(storeClient(t, r.proxyURL, r.container), prefix), journal.WithPlan(workerPlan(3)))
	if err != nil {
		t.Fatal(err)
	}
	up := r.client(rrOptions(nil, nil))
	b := readrecovery.NewBudget("r60")
	ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), "f-000")
	_, err = up.UploadBuffer(ctx, r.container, prefix+"data/f-000", []byte("x"), nil)
	se := stopError(t, err)
	if se.Reason != readrecovery.StopPersistenceFailed {
		t.Fatalf("stop %s, want persistence-failed", se.Reason)
	}
	var marker429 []fakeserver.Request
	for _, q := range r.ledger() {
		if strings.HasPrefix(q.Path, r.blobPath(prefix+"data/")) {
			t.Fatalf("the upload reached the proxy: %+v", q)
		}
		if q.Status == 429 {
			marker429 = append(marker429, q)
		}
	}
	if len(marker429) != 1 {
		t.Fatalf("the store sent its marker %d times, want once (no retry of a 429, by readrecovery or azcore)", len(marker429))
	}
	if !strings.Contains(se.Error(), marker429[0].RequestID) {
		t.Errorf("stop %q does not name the store's request ID %s", se.Error(), marker429[0].RequestID)
	}
	if rep := b.Report(); rep.Requests != 0 || rep.Waits != 0 {
		t.Errorf("report %+v: the store's requests counted in the sequence", rep)
	}
}

// lostResponse forwards a request to Azurite and then loses the answer
// (the proxy answers 502), once, for the request whose method and path
// are armed.
type lostResponse struct {
	base   http.RoundTripper
	mu     sync.Mutex
	method string
	path   string
}

func (l *lostResponse) arm(method, path string) {
	l.mu.Lock()
	l.method, l.path = method, path
	l.mu.Unlock()
}

func (l *lostResponse) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	l.mu.Lock()
	hit := l.path != "" && req.Method == l.method && strings.HasPrefix(req.URL.Path, l.path)
	if hit {
		l.path = ""
	}
	l.mu.Unlock()
	if hit && err == nil {
		resp.Body.Close()
		return nil, errors.New("injected: the response was lost after the service acted")
	}
	return resp, err
}

// The ambiguous failure: the service performed the conditional request
// but its answer was lost. Nothing is lost either: a marker created so
// stays (unresolved, nothing sent); an entry or receipt created so keeps
// its marker (unresolved); a marker deleted so leaves the entry, whose
// restriction holds (waiting). Never clear.
func TestBlobJournalStoreLostResponse(t *testing.T) {
	az := startAzurite(t)
	lost := &lostResponse{}
	r := newRig(t, az, withUpstream(func(base http.RoundTripper) http.RoundTripper {
		lost.base = base
		return lost
	}))
	put := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:" + strings.Repeat("ab", 32), Attempt: 1}
	for i, tc := range []struct {
		name, method, object string
		want                 journal.State
	}{
		{"marker create", "PUT", "pending-request.json", journal.Unresolved},
		{"entry create", "PUT", "backoff-0001.json", journal.Unresolved},
		{"receipt create", "PUT", "receipt-", journal.Unresolved},
		{"marker delete", "DELETE", "pending-request.json", journal.Waiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("lost-%d/", i)
			st := blobjournal.New(storeClient(t, r.proxyURL, r.container), prefix)
			j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(3)))
			if err != nil {
				t.Fatal(err)
			}
			lost.arm(tc.method, r.blobPath(prefix+tc.object))
			ctx := journal.WithUpload(context.Background(), "f-000")
			now := time.Now()
			stepErr := j.Begin(ctx, put)
			sent := stepErr == nil
			if sent && tc.name == "receipt create" {
				stepErr = j.Complete(ctx, put, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "up-1"})
			} else if sent {
				_, stepErr = j.Backoff(ctx, put, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "up-1"},
					readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 60},
					&readrecovery.RetryAfterTiming{ReceivedAtUTC: now.Unix(), NotBeforeUTC: now.Unix() + 60, ServerDelaySeconds: 60})
			}
			var re *journal.RestrictedError
			if stepErr == nil || errors.As(stepErr, &re) {
				t.Fatalf("step = %v, want a persistence failure", stepErr)
			}
			if sent != (tc.name != "marker create") {
				t.Fatalf("Begin allowed the request: %v", sent)
			}
			fresh, err := journal.OpenStore(context.Background(), blobjournal.New(storeClient(t, az.URL, r.container), prefix), journal.Existing())
			if err != nil {
				t.Fatal(err)
			}
			if got := fresh.Status(time.Now()); got.State != tc.want {
				t.Fatalf("fresh status %+v, want %s", got, tc.want)
			}
		})
	}
}
