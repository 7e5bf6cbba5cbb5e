package fakeserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetryAfterBytes asserts the exact header lines a client receives for
// every Retry-After form, read off a raw TCP connection.
func TestRetryAfterBytes(t *testing.T) {
	tests := []struct {
		name  string
		ra    RetryAfter
		lines []string // exact Retry-After lines; none for missing
		label string
	}{
		{"seconds", RetryAfterSeconds(1), []string{"Retry-After: 1"}, "429 retry-after=seconds(1)"},
		{"seconds zero", RetryAfterSeconds(0), []string{"Retry-After: 0"}, "429 retry-after=seconds(0)"},
		{"imf-fixdate", RetryAfterDate(IMFFixdate, 2*time.Second), []string{"Retry-After: Sun, 06 Nov 1994 08:49:42 GMT"}, "429 retry-after=imf-fixdate(+2s)"},
		{"rfc850", RetryAfterDate(RFC850, 2*time.Second), []string{"Retry-After: Sunday, 06-Nov-94 08:49:42 GMT"}, "429 retry-after=rfc850(+2s)"},
		{"asctime", RetryAfterDate(Asctime, 2*time.Second), []string{"Retry-After: Sun Nov  6 08:49:42 1994"}, "429 retry-after=asctime(+2s)"},
		{"past date", RetryAfterDate(IMFFixdate, -10*time.Second), []string{"Retry-After: Sun, 06 Nov 1994 08:49:30 GMT"}, "429 retry-after=imf-fixdate(-10s)"},
		{"malformed", RetryAfterRaw("1.5"), []string{"Retry-After: 1.5"}, "429 retry-after=raw"},
		{"non-ascii digit", RetryAfterRaw("\u0661"), []string{"Retry-After: \u0661"}, "429 retry-after=raw"},
		{"duplicate", RetryAfterRaw("1", "2"), []string{"Retry-After: 1", "Retry-After: 2"}, "429 retry-after=duplicate(2)"},
		{"missing", RetryAfterMissing(), nil, "429 retry-after=missing"},
		{"raw none", RetryAfterRaw(), nil, "429 retry-after=missing"},
		{"zero value", RetryAfter{}, nil, "429 retry-after=missing"},
		{"oversized", RetryAfterOversized(200), []string{"Retry-After: " + strings.Repeat("0", 199) + "1"}, "429 retry-after=oversized(200B)"},
		{"overlong", RetryAfterOverlong(60 * time.Second), []string{"Retry-After: 60"}, "429 retry-after=overlong(60)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			s.Script().Add(RouteFileList, Throttle(tc.ra))
			base, err := s.Start()
			require.NoError(t, err)

			head, body := rawExchange(t, base, "GET /files?limit=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			assert.True(t, strings.HasPrefix(head, "HTTP/1.1 429 Too Many Requests\r\n"), head)
			assert.Equal(t, tc.lines, headerLines(head, "Retry-After"))
			assert.Equal(t, []string{"Date: Sun, 06 Nov 1994 08:49:40 GMT"}, headerLines(head, "Date"))
			assert.Len(t, headerLines(head, "X-Ms-Request-Id"), 1)
			assert.JSONEq(t, `{"error":{"code":"TooManyRequests","message":"The request was throttled (scripted by fakeserver). Retry after the time the Retry-After header names."}}`, string(body))

			var want []string
			for _, l := range tc.lines {
				want = append(want, strings.TrimPrefix(l, "Retry-After: "))
			}
			assert.Equal(t, want, tc.ra.Values(t0), "Values gives the bytes sent")

			reqs := s.Requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, 429, reqs[0].Status)
			assert.Equal(t, tc.label, reqs[0].Fault)
			assert.Equal(t, 0, reqs[0].Rule)
		})
	}
}

// TestRetryAfterDateTruncates: HTTP-dates have whole seconds; a clock with
// a fraction gives the date of clock+d cut to the second.
func TestRetryAfterDateTruncates(t *testing.T) {
	now := t0.Add(900 * time.Millisecond)
	assert.Equal(t, []string{"Sun, 06 Nov 1994 08:49:42 GMT"}, RetryAfterDate(IMFFixdate, 2*time.Second).Values(now))
	assert.Equal(t, []string{"Sun, 06 Nov 1994 08:49:42 GMT"}, RetryAfterDate(IMFFixdate, 2500*time.Millisecond).Values(now))
	// A clock in another zone still writes GMT.
	est := time.FixedZone("EST", -5*3600)
	assert.Equal(t, []string{"Sunday, 06-Nov-94 08:49:42 GMT"}, RetryAfterDate(RFC850, 2*time.Second).Values(t0.In(est)))
}

func TestRetryAfterConstructorsPanic(t *testing.T) {
	assert.Panics(t, func() { RetryAfterSeconds(-1) })
	assert.Panics(t, func() { RetryAfterDate("rfc1123", time.Second) })
	assert.Panics(t, func() { RetryAfterRaw("1\r\nX-Injected: 1") })
	assert.Panics(t, func() { RetryAfterOversized(0) })
	assert.Panics(t, func() { RetryAfterOverlong(-time.Second) })
	assert.Panics(t, func() { Status(200) })
	assert.Panics(t, func() { Status(429) })
	assert.Panics(t, func() { Redirect(200, "/x") })
	assert.Panics(t, func() { Redirect(307, "") })
	assert.Panics(t, func() { SlowBody(0, time.Second) })
	assert.Panics(t, func() { SlowBody(1, -time.Second) })
	assert.Panics(t, func() { Redirect(307, "/x").WithBodySize(1) })
	assert.Panics(t, func() { Throttle(RetryAfterMissing()).WithBodySize(-1) })
}

func TestThrottleBodies(t *testing.T) {
	s := newServer(t, fixedClock())
	s.Script().
		Add(RouteSearchPut, Throttle(RetryAfterSeconds(1))).
		Add(RouteFileUpload, Throttle(RetryAfterSeconds(1))).
		Add(RouteBlobPut, Throttle(RetryAfterSeconds(1)))
	c := newClient(t, s.Transport())

	resp, body := do(t, c, "PUT", "http://fake.test/indexes/a", []byte(`{}`))
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), `"TooManyRequests"`)
	assert.Equal(t, resp.Header.Get("x-ms-request-id"), resp.Header.Get("request-id"))

	resp, _ = do(t, c, "POST", "http://fake.test/files", []byte(`data`))
	assert.Equal(t, 429, resp.StatusCode)

	resp, body = do(t, c, "PUT", "http://fake.test/c/b", []byte(`data`))
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "application/xml", resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), "<Code>TooManyRequests</Code>")

	// A replaced answer stores nothing.
	_, ok := s.Index("a")
	assert.False(t, ok)
	assert.Empty(t, s.Files())
	_, _, ok = s.Blob("c", "b")
	assert.False(t, ok)
}

func TestLargeThrottleBody(t *testing.T) {
	const size = 8 << 20
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			s.Script().Add(RouteBlobGet, Throttle(RetryAfterSeconds(1)).WithBodySize(size), Times(1))
			c, base := m.reach(t, s)

			resp, body := do(t, c, "GET", base+"/c/b", nil)
			assert.Equal(t, 429, resp.StatusCode)
			assert.Equal(t, int64(size), resp.ContentLength)
			require.Len(t, body, size)
			assert.True(t, strings.HasPrefix(string(body), `<?xml`))
			assert.Equal(t, "429 retry-after=seconds(1) body=8388608B", s.Requests()[0].Fault)

			// A client that closes the big body unread does not hang the
			// server.
			s.Script().Add(RouteBlobGet, Throttle(RetryAfterSeconds(1)).WithBodySize(size), Times(1))
			resp2, err := c.Get(base + "/c/b")
			require.NoError(t, err)
			assert.Equal(t, 429, resp2.StatusCode)
			require.NoError(t, resp2.Body.Close())
		})
	}
	// A size below the document cuts it.
	s := newServer(t)
	s.Script().Add(RouteFileList, Throttle(RetryAfterMissing()).WithBodySize(5))
	resp, body := do(t, newClient(t, s.Transport()), "GET", "http://fake.test/files", nil)
	assert.Equal(t, `{"err`, string(body))
	assert.Equal(t, int64(5), resp.ContentLength)
}

func TestStatusAndRedirect(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			s.Script().
				Add(RouteFileList, Status(500), Nth(1)).
				Add(RouteFileList, Status(503), Nth(2)).
				Add(RouteBlobGet, Status(503), Nth(1)).
				Add(RouteSearchPut, Redirect(301, "http://elsewhere.example/indexes/a"), Nth(1)).
				Add(RouteSearchPut, Redirect(302, "/indexes/b"), Nth(2)).
				Add(RouteSearchPut, Redirect(307, "https://elsewhere.example/indexes/a?x=1"), Nth(3)).
				Add(RouteSearchPut, Redirect(308, "/moved"), Nth(4))
			c, base := m.reach(t, s)

			resp, body := do(t, c, "GET", base+"/files", nil)
			assert.Equal(t, 500, resp.StatusCode)
			assert.JSONEq(t, `{"error":{"code":"InternalError","message":"The server encountered an internal error (scripted by fakeserver)."}}`, string(body))
			resp, body = do(t, c, "GET", base+"/files", nil)
			assert.Equal(t, 503, resp.StatusCode)
			assert.Contains(t, string(body), `"ServerBusy"`)
			resp, body = do(t, c, "GET", base+"/c/b", nil)
			assert.Equal(t, 503, resp.StatusCode)
			assert.Contains(t, string(body), `<Code>ServerBusy</Code>`)
			resp, _ = do(t, c, "GET", base+"/files", nil)
			assert.Equal(t, 200, resp.StatusCode, "the rules fired once each")

			for i, want := range []struct {
				code int
				loc  string
			}{{301, "http://elsewhere.example/indexes/a"}, {302, "/indexes/b"}, {307, "https://elsewhere.example/indexes/a?x=1"}, {308, "/moved"}} {
				resp, _ := do(t, c, "PUT", base+"/indexes/a", []byte(`{}`))
				assert.Equal(t, want.code, resp.StatusCode, i)
				assert.Equal(t, want.loc, resp.Header.Get("Location"), i)
			}
			_, ok := s.Index("a")
			assert.False(t, ok, "a redirected PUT stores nothing")
			assert.Equal(t, []string{"500", "503", "503", "", "redirect 301", "redirect 302", "redirect 307", "redirect 308"}, faultsOf(s.Requests()))
		})
	}
}

func faultsOf(reqs []Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Fault)
	}
	return out
}

// TestSlowBodyLoopback trickles a real body with short real delays.
func TestSlowBodyLoopback(t *testing.T) {
	s := newServer(t)
	s.PutBlob("c", "b", []byte("0123456789ab"))
	s.Script().Add(RouteBlobGet, SlowBody(4, 20*time.Millisecond))
	base, err := s.Start()
	require.NoError(t, err)
	c := newClient(t, nil)

	start := time.Now()
	resp, body := do(t, c, "GET", base+"/c/b", nil)
	elapsed := time.Since(start)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "0123456789ab", string(body))
	assert.GreaterOrEqual(t, elapsed, 60*time.Millisecond, "3 chunks of 4 bytes, 20 ms before each")
	assert.Equal(t, "slow_body(4B/20ms)", s.Requests()[0].Fault)
}

// TestStalledBodyLoopback: the headers arrive, the body never does; the
// client's deadline ends it, and so does the server's Close.
func TestStalledBodyLoopback(t *testing.T) {
	s := newServer(t)
	s.PutBlob("c", "b", []byte("checkpoint"))
	s.Script().Add(RouteBlobGet, StalledBody())
	base, err := s.Start()
	require.NoError(t, err)
	c := newClient(t, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/c/b", nil)
	resp, err := c.Do(req)
	require.NoError(t, err, "the headers arrive")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, int64(len("checkpoint")), resp.ContentLength)
	_, err = io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	resp.Body.Close()

	// A second stalled read, ended by the server closing.
	resp, err = c.Get(base + "/c/b")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- err
	}()
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close did not end the stalled body")
	}
}

// TestConnectionResetLoopback: the client sees a TCP RST.
func TestConnectionResetLoopback(t *testing.T) {
	s := newServer(t)
	s.Script().Add(RouteFileUpload, ConnectionReset(), Nth(1))
	base, err := s.Start()
	require.NoError(t, err)
	c := newClient(t, nil)

	_, err = c.Post(base+"/files", "application/octet-stream", strings.NewReader("payload"))
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "want ECONNRESET, got %v", err)

	resp, _ := do(t, c, "POST", base+"/files", []byte("payload"))
	assert.Equal(t, 201, resp.StatusCode, "the rule fired once")
	reqs := s.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, Request{Seq: 1, Ordinal: 1, Method: "POST", Route: RouteFileUpload, Path: "/files",
		Arrived: reqs[0].Arrived, Fault: "reset", Rule: 0, BodyDigest: sha([]byte("payload")), BodySize: 7}, reqs[0])
	assert.Len(t, s.Files(), 1, "the reset upload stored nothing")
}

func TestFaultAccessors(t *testing.T) {
	f := Throttle(RetryAfterDate(RFC850, time.Second))
	assert.Equal(t, "throttle", f.Kind())
	assert.Equal(t, 429, f.StatusCode())
	assert.Equal(t, "rfc850", f.RetryAfter().Form())
	assert.Equal(t, "", Fault{}.Kind())
	assert.Equal(t, "", Fault{}.String())
	assert.Equal(t, "stalled_body", StalledBody().String())
	assert.Equal(t, 0, StalledBody().StatusCode())
	assert.Equal(t, "503 body=0B", Status(503).WithBodySize(0).String())
	assert.Equal(t, "missing", RetryAfter{}.Form())
}

// TestShutdownEndsStalledBody: a graceful shutdown does not wait for a body
// that would never finish.
func TestShutdownEndsStalledBody(t *testing.T) {
	s := newServer(t)
	s.PutBlob("c", "b", []byte("checkpoint"))
	s.Script().Add(RouteBlobGet, StalledBody())
	base, err := s.Start()
	require.NoError(t, err)
	resp, err := newClient(t, nil).Get(base + "/c/b")
	require.NoError(t, err)
	defer resp.Body.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	assert.NoError(t, s.Shutdown(ctx))
	assert.Less(t, time.Since(start), 2*time.Second)
	_, err = io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
