package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/rrazuretest"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// retryAfter is the server delay of every injected 429 that is waited: 1 s
// keeps the suite fast and is still measurable in the ledger.
const retryAfter = time.Second

var throttle1s = fakeserver.Throttle(fakeserver.RetryAfterSeconds(int64(retryAfter / time.Second)))

// Scenario 1: a checkpoint's two reads (source and generated definition)
// under one Budget. A 429 on the first: one wait, the right bytes. A 429 on
// the second: no second wait; the caller gets azcore's ResponseError with
// 429 and the original x-ms-request-id; azcore does not retry it.
func TestCheckpointReads(t *testing.T) {
	r := newRig(t, startAzurite(t))
	source := []byte(`{"checkpoint":"source","rows":42}`)
	generated := []byte(`{"checkpoint":"generated","fields":["id","name"]}`)
	sourceETag := r.seed("source.json", source)
	r.seed("generated.json", generated)
	r.script.
		Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("source.json")), fakeserver.Times(1)).
		Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("generated.json")), fakeserver.Times(1))

	var tries atomic.Int32
	c := r.client(rrOptions(nil, &tries))
	b := readrecovery.NewBudget("checkpoint " + r.container)
	ctx := readrecovery.WithBudget(context.Background(), b)

	start := time.Now()
	got, err := download(ctx, c, r.container, "source.json")
	if err != nil {
		t.Fatalf("source read: %v", err)
	}
	if !bytes.Equal(got, source) {
		t.Fatalf("source read %q, want %q", got, source)
	}
	if d := time.Since(start); d < retryAfter {
		t.Fatalf("source read took %v, less than the %v Retry-After", d, retryAfter)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("azcore made %d tries of the source read, want 1 (the re-send is readrecovery's)", n)
	}

	tries.Store(0)
	_, err = download(ctx, c, r.container, "generated.json")
	re := responseError(t, err)
	if n := b.Report().Waits; n != 1 {
		t.Fatalf("%d waits after the second read, want 1: the opportunity was used", n)
	}
	if re.StatusCode != http.StatusTooManyRequests || re.ErrorCode != "TooManyRequests" {
		t.Fatalf("ResponseError status %d code %q, want 429 TooManyRequests", re.StatusCode, re.ErrorCode)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("azcore made %d tries of the throttled read, want 1", n)
	}

	// The proxy saw: 429, 200 (forwarded), 429, and nothing more.
	led := r.ledger()
	if len(led) != 3 {
		t.Fatalf("the proxy saw %d requests, want 3: %+v", len(led), led)
	}
	for i, want := range []struct {
		path   string
		status int
	}{{"source.json", 429}, {"source.json", 200}, {"generated.json", 429}} {
		if led[i].Method != http.MethodGet || led[i].Path != r.blobPath(want.path) || led[i].Status != want.status {
			t.Fatalf("proxy request %d: %s %s %d, want GET %s %d", i+1, led[i].Method, led[i].Path, led[i].Status, want.path, want.status)
		}
	}
	if id := re.RawResponse.Header.Get("x-ms-request-id"); id == "" || id != led[2].RequestID {
		t.Fatalf("ResponseError x-ms-request-id %q, want the proxy's original %q", id, led[2].RequestID)
	}
	r.proxy.AssertGap(t, fakeserver.RouteBlobGet, 1, retryAfter)

	// Azurite saw one read: the re-sent source GET.
	saw := r.azuriteSaw()
	if len(saw) != 1 || saw[0] != (azuriteEntry{http.MethodGet, r.blobPath("source.json"), 200}) {
		t.Fatalf("Azurite saw %+v, want one GET of source.json answered 200", saw)
	}

	rep := b.Report()
	if rep.Requests != 3 || rep.Waits != 1 || rep.WaitLog[0].Trigger != "read-429" ||
		rep.Stop != readrecovery.StopOpportunityUsed || rep.Mutation != nil || rep.Ownership != "" {
		t.Fatalf("report %+v", rep)
	}
	// The wait is counted from the 429's receipt, so the sleep itself
	// (Actual, from the span's start) may be a few µs under a second; what
	// must hold is that the re-send reached the server a whole Retry-After
	// after the throttled request did, and that the wait was not cut.
	if gap := led[1].Arrived.Sub(led[0].Arrived); gap < retryAfter {
		t.Fatalf("re-send arrived %v after the throttled GET, less than the %v Retry-After", gap, retryAfter)
	}
	if w := rep.WaitLog[0]; w.Canceled || w.Actual < w.Planned || w.Planned > retryAfter || w.RetryAfter.Kind != readrecovery.RetryAfterSeconds || w.RetryAfter.Value != 1 || w.RequestID != led[0].RequestID {
		t.Fatalf("wait %+v", w)
	}
	if len(rep.SuccessfulReads) != 1 || rep.SuccessfulReads[0].ETag != sourceETag || rep.SuccessfulReads[0].RequestID != led[1].RequestID {
		t.Fatalf("successful reads %+v, want the source read with ETag %s", rep.SuccessfulReads, sourceETag)
	}
	if len(rep.FailedReads) != 2 || rep.FailedReads[1].RequestID != led[2].RequestID {
		t.Fatalf("failed reads %+v", rep.FailedReads)
	}

	// The sequence stopped: the next read fails before any network access.
	tries.Store(0)
	_, err = download(ctx, c, r.container, "source.json")
	if se := stopError(t, err); se.Reason != readrecovery.StopOpportunityUsed {
		t.Fatalf("stop reason %q", se.Reason)
	}
	if n, m := tries.Load(), len(r.ledger()); n != 1 || m != 3 {
		t.Fatalf("after the stop: azcore made %d tries (want 1), the proxy saw %d requests (want 3)", n, m)
	}
}

// Scenario 2: an upload (PUT) meets 429. It is sent exactly once and azcore
// does not retry it; the readback GET of the same Budget waits the
// Retry-After first; the report never says owned.
func TestUploadThrottled(t *testing.T) {
	az := startAzurite(t)
	data := []byte(`{"file":"report.pdf","bytes":1234}`)

	t.Run("429 at the gateway: nothing stored, unproven", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		r.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(r.blobPath("upload.json")), fakeserver.Times(1))
		rep, readErr := uploadThenReadBack(t, r, data)
		if re := responseError(t, readErr); re.StatusCode != http.StatusNotFound || !bloberror.HasCode(readErr, bloberror.BlobNotFound) {
			t.Fatalf("readback: %d %s, want 404 BlobNotFound", re.StatusCode, re.ErrorCode)
		}
		if rep.Ownership != readrecovery.Unproven {
			t.Fatalf("ownership %q, want unproven", rep.Ownership)
		}
		saw := r.azuriteSaw()
		if count(saw, http.MethodPut, r.blobPath("upload.json")) != 0 || count(saw, http.MethodGet, r.blobPath("upload.json")) != 1 {
			t.Fatalf("Azurite saw %+v, want no PUT and one GET", saw)
		}
	})

	t.Run("ACK lost after commit: observed, not owned", func(t *testing.T) {
		t.Parallel()
		var lost *ackLost
		r := newRig(t, az, withUpstream(func(base http.RoundTripper) http.RoundTripper {
			lost = &ackLost{base: base}
			return lost
		}))
		lost.path = r.blobPath("upload.json")
		rep, readErr := uploadThenReadBack(t, r, data)
		if readErr != nil {
			t.Fatalf("readback: %v", readErr)
		}
		if rep.Ownership != readrecovery.Observed {
			t.Fatalf("ownership %q, want observed: the GET found the object, the PUT had no ACK", rep.Ownership)
		}
		saw := r.azuriteSaw()
		if count(saw, http.MethodPut, r.blobPath("upload.json")) != 1 || count(saw, http.MethodGet, r.blobPath("upload.json")) != 1 {
			t.Fatalf("Azurite saw %+v, want one PUT (stored) and one GET", saw)
		}
	})
}

// uploadThenReadBack uploads data as upload.json through r's proxy, checks
// that the PUT met 429 once and only once, reads it back in the same
// sequence and checks the wait before the readback. It returns the report
// and the readback's error; the readback's bytes are checked when it
// succeeds.
func uploadThenReadBack(t *testing.T, r *rig, data []byte) (readrecovery.Report, error) {
	t.Helper()
	var tries atomic.Int32
	c := r.client(rrOptions(nil, &tries))
	b := readrecovery.NewBudget("upload " + r.container)
	ctx := readrecovery.WithBudget(context.Background(), b)

	_, err := c.UploadBuffer(ctx, r.container, "upload.json", data, nil)
	re := responseError(t, err)
	if re.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("upload: status %d, want 429", re.StatusCode)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("azcore made %d tries of the PUT, want 1", n)
	}
	if n := r.proxy.Count(fakeserver.RouteBlobPut, http.MethodPut); n != 1 {
		t.Fatalf("the proxy saw %d PUTs, want 1", n)
	}
	r.proxy.AssertNoMutationSentTwice(t)

	start := time.Now()
	got, readErr := download(ctx, c, r.container, "upload.json")
	if d := time.Since(start); d < retryAfter {
		t.Fatalf("the readback took %v: it did not wait the PUT's %v Retry-After", d, retryAfter)
	}
	if readErr == nil && !bytes.Equal(got, data) {
		t.Fatalf("readback %q, want %q", got, data)
	}
	// The GET came at least Retry-After after the PUT's 429.
	r.proxy.AssertGap(t, fakeserver.RouteBlobPut, 1, retryAfter)
	led := r.ledger()
	if len(led) != 2 || led[0].Method != http.MethodPut || led[1].Method != http.MethodGet {
		t.Fatalf("the proxy saw %+v, want PUT then GET", led)
	}

	rep := b.Report()
	m := rep.Mutation
	if m == nil || m.Method != http.MethodPut || m.StatusCode != http.StatusTooManyRequests || m.Acked || m.RequestID != led[0].RequestID {
		t.Fatalf("mutation %+v, want the PUT's unacknowledged 429 with request ID %q", m, led[0].RequestID)
	}
	if rep.Requests != 2 || rep.Waits != 1 || rep.WaitLog[0].Trigger != "write-429" || rep.WaitLog[0].Actual < retryAfter*9/10 || rep.Stop != "" {
		t.Fatalf("report %+v", rep)
	}
	if rep.Ownership == readrecovery.Owned {
		t.Fatal("ownership owned without an ACK")
	}
	return rep, readErr
}

// Scenario 3: persistent 429 (in every Retry-After form), overlong and
// oversized Retry-After, a delay longer than what remains: the sequence
// stops as specified; the next call fails with ErrSequenceStopped before
// the network, and azcore does not retry it (NonRetriable).
func TestStops(t *testing.T) {
	az := startAzurite(t)
	for _, tc := range []struct {
		name     string
		ra       fakeserver.RetryAfter
		budget   []readrecovery.BudgetOption
		reason   readrecovery.StopReason
		kind     readrecovery.RetryAfterKind
		waited   bool // one wait, then the re-sent GET met 429 again
		dateForm bool
	}{
		{name: "persistent 429, delay-seconds", ra: fakeserver.RetryAfterSeconds(1),
			reason: readrecovery.StopPersistent429, kind: readrecovery.RetryAfterSeconds, waited: true},
		{name: "persistent 429, IMF-fixdate", ra: fakeserver.RetryAfterDate(fakeserver.IMFFixdate, 2*time.Second),
			reason: readrecovery.StopPersistent429, kind: readrecovery.RetryAfterDate, waited: true, dateForm: true},
		{name: "persistent 429, RFC 850 date", ra: fakeserver.RetryAfterDate(fakeserver.RFC850, 2*time.Second),
			reason: readrecovery.StopPersistent429, kind: readrecovery.RetryAfterDate, waited: true, dateForm: true},
		{name: "persistent 429, asctime date", ra: fakeserver.RetryAfterDate(fakeserver.Asctime, 2*time.Second),
			reason: readrecovery.StopPersistent429, kind: readrecovery.RetryAfterDate, waited: true, dateForm: true},
		{name: "overlong delay-seconds", ra: fakeserver.RetryAfterOverlong(60 * time.Second),
			reason: readrecovery.StopOverlong},
		{name: "overlong IMF-fixdate", ra: fakeserver.RetryAfterDate(fakeserver.IMFFixdate, 60*time.Second),
			reason: readrecovery.StopOverlong},
		{name: "oversized field", ra: fakeserver.RetryAfterOversized(200),
			reason: readrecovery.StopOversized},
		{name: "longer than what remains", ra: fakeserver.RetryAfterSeconds(5), budget: []readrecovery.BudgetOption{readrecovery.MaxTotal(3 * time.Second)},
			reason: readrecovery.StopWaitExceedsTotal},
		{name: "above the budget's wait ceiling", ra: fakeserver.RetryAfterSeconds(3), budget: []readrecovery.BudgetOption{readrecovery.MaxWait(2 * time.Second)},
			reason: readrecovery.StopOverlong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, az)
			path := r.blobPath("checkpoint.json")
			r.seed("checkpoint.json", []byte("{}"))
			r.script.Add(fakeserver.RouteBlobGet, fakeserver.Throttle(tc.ra), fakeserver.MatchPath(path), fakeserver.Always())

			var tries atomic.Int32
			c := r.client(rrOptions(nil, &tries))
			b := readrecovery.NewBudget("stops "+r.container, tc.budget...)
			ctx := readrecovery.WithBudget(context.Background(), b)

			_, err := download(ctx, c, r.container, "checkpoint.json")
			re := responseError(t, err) // the last 429, untouched (untouched-when-not-recovered)
			if re.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", re.StatusCode)
			}
			if n := tries.Load(); n != 1 {
				t.Fatalf("azcore made %d tries, want 1", n)
			}
			wantSent := 1
			if tc.waited {
				wantSent = 2
			}
			led := r.ledger()
			if len(led) != wantSent {
				t.Fatalf("the proxy saw %d GETs, want %d", len(led), wantSent)
			}
			if id := re.RawResponse.Header.Get("x-ms-request-id"); id != led[len(led)-1].RequestID {
				t.Fatalf("ResponseError x-ms-request-id %q, want the last 429's %q", id, led[len(led)-1].RequestID)
			}

			rep := b.Report()
			if rep.Stop != tc.reason || rep.Requests != wantSent {
				t.Fatalf("report %+v: want stop %q after %d requests", rep, tc.reason, wantSent)
			}
			if tc.waited {
				if rep.Waits != 1 {
					t.Fatalf("waits %d, want 1", rep.Waits)
				}
				w := rep.WaitLog[0]
				if w.RetryAfter.Kind != tc.kind || w.Timing == nil {
					t.Fatalf("wait %+v, want kind %q with timing", w, tc.kind)
				}
				if tc.dateForm {
					// The date is the server's clock + 2 s, truncated to the
					// second: the delay resolves to 1 or 2 s, and the re-send
					// arrives no earlier than the date itself.
					if w.RetryAfter.Value < 1 || w.RetryAfter.Value > 2 {
						t.Fatalf("date delay %d s, want 1 or 2", w.RetryAfter.Value)
					}
					if notBefore := time.Unix(w.Timing.NotBeforeUTC, 0); led[1].Arrived.Before(notBefore) {
						t.Fatalf("the re-send arrived at %v, before the Retry-After date %v", led[1].Arrived, notBefore)
					}
				}
				r.proxy.AssertGap(t, fakeserver.RouteBlobGet, 1, time.Duration(w.RetryAfter.Value)*time.Second)
			} else if rep.Waits != 0 {
				t.Fatalf("waits %d, want none: %+v", rep.Waits, rep.WaitLog)
			}

			// The next call of the sequence: ErrSequenceStopped, before any
			// network access, one azcore try.
			tries.Store(0)
			_, err = download(ctx, c, r.container, "checkpoint.json")
			se := stopError(t, err)
			if se.Reason != tc.reason {
				t.Fatalf("stop reason %q, want %q", se.Reason, tc.reason)
			}
			if !errors.As(err, new(interface{ NonRetriable() })) {
				t.Fatal("the stop error is not NonRetriable")
			}
			if n, m := tries.Load(), len(r.ledger()); n != 1 || m != wantSent {
				t.Fatalf("after the stop: azcore made %d tries (want 1), the proxy saw %d requests (want %d)", n, m, wantSent)
			}
			if saw := r.azuriteSaw(); count(saw, http.MethodGet, path) != 0 {
				t.Fatalf("Azurite saw %+v, want no GET", saw)
			}
		})
	}
}

// Scenario 4: a redirect from the proxy goes back to the caller; it is
// never followed, even to a place that would answer 200.
func TestRedirectNotFollowed(t *testing.T) {
	az := startAzurite(t)
	var trapHits atomic.Int32
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		trapHits.Add(1)
		w.Write([]byte("elsewhere"))
	}))
	t.Cleanup(trap.Close)

	t.Run("rrazure returns the 307", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		r.seed("checkpoint.json", []byte("{}"))
		// Straight to Azurite, where the same signed request would succeed.
		r.script.Add(fakeserver.RouteBlobGet, fakeserver.Redirect(http.StatusTemporaryRedirect, az.URL+r.blobPath("checkpoint.json")),
			fakeserver.MatchPath(r.blobPath("checkpoint.json")))
		var tries atomic.Int32
		c := r.client(rrOptions(nil, &tries))
		b := readrecovery.NewBudget("redirect " + r.container)
		_, err := download(readrecovery.WithBudget(context.Background(), b), c, r.container, "checkpoint.json")
		re := responseError(t, err)
		if re.StatusCode != http.StatusTemporaryRedirect || re.RawResponse.Header.Get("Location") == "" {
			t.Fatalf("status %d, want the 307 with its Location", re.StatusCode)
		}
		if n, m := tries.Load(), len(r.ledger()); n != 1 || m != 1 {
			t.Fatalf("azcore made %d tries, the proxy saw %d requests; want 1 and 1", n, m)
		}
		if saw := r.azuriteSaw(); count(saw, http.MethodGet, r.blobPath("checkpoint.json")) != 0 {
			t.Fatalf("Azurite saw %+v: the redirect was followed", saw)
		}
		if rep := b.Report(); rep.Requests != 1 || rep.Stop != "" {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("a redirect-following http.Client is refused by the transport", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		r.script.Add(fakeserver.RouteBlobGet, fakeserver.Redirect(http.StatusFound, trap.URL+"/elsewhere"),
			fakeserver.MatchPath(r.blobPath("checkpoint.json")))
		// A user who wired readrecovery.New into a default http.Client by
		// hand: the client follows, the transport refuses (same-request-no-redirects).
		var tries atomic.Int32
		o := policy.ClientOptions{Transport: &http.Client{Transport: readrecovery.New(nil)}}
		o.Retry = rrazure.RetryOptions(o.Retry)
		o.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
		c := r.client(o)
		_, err := download(context.Background(), c, r.container, "checkpoint.json")
		if !errors.Is(err, readrecovery.ErrRedirectRefused) {
			t.Fatalf("err = %v, want ErrRedirectRefused", err)
		}
		if n := tries.Load(); n != 1 {
			t.Fatalf("azcore made %d tries, want 1: the refusal is NonRetriable", n)
		}
		if trapHits.Load() != 0 || len(r.ledger()) != 1 {
			t.Fatalf("redirect target hit %d times, proxy saw %d requests; want 0 and 1", trapHits.Load(), len(r.ledger()))
		}
	})
}

// Scenario 5: shared-key signatures still verify on the re-sent GET: it is
// the same request (same Authorization, same x-ms-date), and Azurite, which
// does check signatures, answers it 200.
func TestSharedKeyOnResend(t *testing.T) {
	az := startAzurite(t)
	r := newRig(t, az)
	data := []byte(`{"checkpoint":"signed"}`)
	r.seed("signed.json", data)
	r.script.Add(fakeserver.RouteBlobGet, throttle1s, fakeserver.MatchPath(r.blobPath("signed.json")), fakeserver.Times(1))

	rec := newRecorder(nil)
	c := r.client(rrOptions(rec, nil))
	ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("signed "+r.container))
	got, err := download(ctx, c, r.container, "signed.json")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %q, want %q", got, data)
	}
	at := rec.Attempts()
	if len(at) != 2 {
		t.Fatalf("%d attempts left readrecovery, want 2", len(at))
	}
	if at[0] != at[1] || at[0].AuthDigest == "" || at[0].Date == "" {
		t.Fatalf("the re-sent request differs from the first: %+v vs %+v", at[0], at[1])
	}
	saw := r.azuriteSaw()
	if len(saw) != 1 || saw[0] != (azuriteEntry{http.MethodGet, r.blobPath("signed.json"), 200}) {
		t.Fatalf("Azurite saw %+v, want the re-sent GET answered 200", saw)
	}

	// Control: Azurite does verify shared-key signatures. A wrong key
	// through the same proxy is refused.
	cred, err := azblobSharedKey("AAAA" + azuriteKey[4:])
	if err != nil {
		t.Fatal(err)
	}
	bad := newBlobClientWithCred(t, r.proxyURL, cred, rrOptions(nil, nil))
	_, err = download(context.Background(), bad, r.container, "signed.json")
	if re := responseError(t, err); re.StatusCode != http.StatusForbidden {
		t.Fatalf("wrong key: status %d, want 403", re.StatusCode)
	}
}

// TestAzcoreDefaultsResendThrottledPut is the reason for the adapter, shown
// with the real SDK: with azcore's default options, a PUT that meets 429 is
// sent again after the Retry-After, and the proxy's ledger sees the same
// mutation twice. With rrazure it is sent once (TestUploadThrottled).
func TestAzcoreDefaultsResendThrottledPut(t *testing.T) {
	r := newRig(t, startAzurite(t))
	r.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(r.blobPath("upload.json")), fakeserver.Times(1))
	c := r.client(policy.ClientOptions{}) // azcore's defaults: 429 is retried for every method
	if _, err := c.UploadBuffer(context.Background(), r.container, "upload.json", []byte("{}"), nil); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if n := r.proxy.Count(fakeserver.RouteBlobPut, http.MethodPut); n != 2 {
		t.Fatalf("the proxy saw %d PUTs, want 2: azcore re-sent the throttled PUT", n)
	}
	var c2 collect
	if r.proxy.AssertNoMutationSentTwice(&c2) || len(c2.errs) != 1 {
		t.Fatalf("the ledger's no-resend check passed: %v", c2.errs)
	}
	if saw := r.azuriteSaw(); count(saw, http.MethodPut, r.blobPath("upload.json")) != 1 {
		t.Fatalf("Azurite saw %+v, want the re-sent PUT", saw)
	}
}

// collect is a fakeserver.TB that keeps the errors reported to it.
type collect struct{ errs []string }

func (*collect) Helper() {}
func (c *collect) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}
