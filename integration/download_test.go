package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/readrecovery/readrecovery"
)

// burst is an upstream transport for the proxy that holds the parallel
// range GETs of one blob until all of them are in flight together, then
// answers a chosen few of them 429 with Retry-After: 1 (a throttle burst)
// and forwards the rest to Azurite. The blob's first GET (azblob's sizing
// request) passes straight through.
type burst struct {
	base     http.RoundTripper
	path     string
	parallel int          // how many parallel range GETs to hold together
	throttle map[int]bool // which of them (1-based arrival order) meet 429

	mu      sync.Mutex
	seen    int
	all     chan struct{}
	answers atomic.Int32
}

func (b *burst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.Path != b.path {
		return b.base.RoundTrip(req)
	}
	b.mu.Lock()
	b.seen++
	n := b.seen
	if n == b.parallel+1 {
		close(b.all)
	}
	b.mu.Unlock()
	if n == 1 || n > b.parallel+1 {
		return b.base.RoundTrip(req) // the sizing GET, and the re-sends
	}
	select {
	case <-b.all: // every parallel range is in flight
	case <-time.After(5 * time.Second):
	}
	if !b.throttle[n-1] {
		return b.base.RoundTrip(req)
	}
	b.answers.Add(1)
	h := http.Header{}
	h.Set("Retry-After", "1")
	h.Set("x-ms-request-id", "burst-"+randomHex(6))
	h.Set("x-ms-error-code", "TooManyRequests")
	return &http.Response{
		Status: "429 Too Many Requests", StatusCode: http.StatusTooManyRequests,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(nil)), Request: req,
	}, nil
}

// azblob's DownloadBuffer fetches the ranges of one checkpoint in parallel
// (concurrency 8). A throttle burst answers three of the eight ranges in
// flight 429: they join the one window the first opened, each is re-sent
// once at its end, no range GET reaches the server inside the window, and
// the download returns the right bytes.
func TestDownloadBufferThrottleBurst(t *testing.T) {
	az := startAzurite(t)
	const block, blocks = 8 << 10, 9
	data := make([]byte, block*blocks)
	_, _ = rand.Read(data)
	var bu *burst
	r := newRig(t, az, withUpstream(func(base http.RoundTripper) http.RoundTripper {
		bu = &burst{base: base, parallel: blocks - 1, throttle: map[int]bool{2: true, 3: true, 5: true}, all: make(chan struct{})}
		return bu
	}))
	bu.path = r.blobPath("checkpoint.bin")
	r.seed("checkpoint.bin", data)

	var tries atomic.Int32
	c := r.client(rrOptions(nil, &tries))
	b := readrecovery.NewBudget("checkpoint download")
	ctx := readrecovery.WithBudget(context.Background(), b)
	got := make([]byte, len(data))
	start := time.Now()
	n, err := c.DownloadBuffer(ctx, r.container, "checkpoint.bin", got, &blob.DownloadBufferOptions{BlockSize: block, Concurrency: 8})
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	if n != int64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes, not the blob's %d (or other bytes)", n, len(data))
	}
	if a := bu.answers.Load(); a != 3 {
		t.Fatalf("the burst answered %d ranges 429, want 3", a)
	}

	led := r.ledger()
	var gets []time.Time
	var throttled []time.Time
	for _, q := range led {
		if q.Method != http.MethodGet || q.Path != r.blobPath("checkpoint.bin") {
			continue
		}
		gets = append(gets, q.Arrived)
		if q.Status == http.StatusTooManyRequests {
			throttled = append(throttled, q.Arrived)
		}
	}
	if len(gets) != blocks+3 || len(throttled) != 3 {
		t.Fatalf("the proxy saw %d range GETs (%d answered 429), want %d (3): every range at most twice", len(gets), len(throttled), blocks+3)
	}
	sort.Slice(gets, func(i, j int) bool { return gets[i].Before(gets[j]) })
	// The window opened at the first 429's answer: the ranges held by the
	// burst were all in flight by then; the three re-sends come at T, a
	// second later, and nothing in between.
	inFlightEnd := gets[blocks-1]
	resends := gets[blocks:]
	for _, at := range resends {
		if at.Sub(inFlightEnd) < time.Second {
			t.Errorf("a re-send reached the server %v after the burst, inside the 1 s window", at.Sub(inFlightEnd))
		}
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("the download took %v: shorter than the server's 1 s", d)
	}
	if n := tries.Load(); n != blocks {
		t.Fatalf("azcore made %d tries, want %d: one per range, the re-sends are readrecovery's", n, blocks)
	}

	rep := b.Report()
	if rep.Stop != "" || rep.Window == nil || rep.Window.Trigger != "read-429" || rep.Window.Joined != 2 ||
		rep.Waits != 3 || rep.Requests != blocks+3 {
		t.Fatalf("report: stop %q window %+v waits %d requests %d; want no stop, one read-429 window joined by 2, 3 waits, %d requests",
			rep.Stop, rep.Window, rep.Waits, rep.Requests, blocks+3)
	}
	for _, w := range rep.WaitLog {
		if !w.Resend || w.Actual < time.Second-50*time.Millisecond {
			t.Errorf("wait %+v: want a re-send's wait of about 1 s", w)
		}
	}
	t.Logf("ledger: %d range GETs; burst at +%v; re-sends at +%v, +%v, +%v after the last range in flight",
		len(gets), inFlightEnd.Sub(gets[0]).Round(time.Millisecond),
		resends[0].Sub(inFlightEnd).Round(time.Millisecond), resends[1].Sub(inFlightEnd).Round(time.Millisecond), resends[2].Sub(inFlightEnd).Round(time.Millisecond))
}
