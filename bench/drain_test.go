package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// drainLimit is the most of a 429's body drain429 reads into memory.
const drainLimit = 64 << 10

// drain429 is the base transport of the rr-drained control, not something
// readrecovery does. For a 429 only, it reads the body to its end (at most
// drainLimit bytes) and closes it, then hands back a copy in memory: the
// keep-alive connection is back in the pool before readrecovery closes the
// 429's body unread (R12), so the re-send can reuse it as the peers' do.
// A body longer than drainLimit keeps its remainder on the original body,
// whose Close then costs the connection as it would without drain429.
// Every other response passes through untouched.
type drain429 struct{ base http.RoundTripper }

func (d drain429) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, drainLimit+1))
	if err != nil || len(buf) > drainLimit {
		// Not all of it, or a read error: what is left (or the error, which
		// net/http's body repeats) stays on the original body.
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close() // at EOF already: the connection is back in the pool
	resp.Body = io.NopCloser(bytes.NewReader(buf))
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the base.
func (d drain429) CloseIdleConnections() {
	if c, ok := d.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// newDrainTestServer is the benchmark server plus /long429: a 429
// ("Retry-After: 0") whose body is longBody, longer than drainLimit.
func newDrainTestServer(t *testing.T) (*benchServer, []byte) {
	t.Helper()
	longBody := bytes.Repeat([]byte("x"), drainLimit+10)
	s := newUnstartedBenchServer()
	s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/long429" {
			s.serve(w, r)
			return
		}
		s.hits.Add(1)
		w.Header()["Retry-After"] = []string{"0"}
		w.Header()["Content-Length"] = []string{strconv.Itoa(len(longBody))}
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write(longBody)
	})
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s, longBody
}

// TestDrain429 sends a 429 and then a 200 through drain429 (or the bare
// base) and counts the connections the server accepted: one when the
// 429's connection went back to the pool, two when closing the 429's body
// cost it.
func TestDrain429(t *testing.T) {
	cases := []struct {
		name      string
		drain     bool
		path      string
		read      bool // read the 429's body to its end before closing it
		wantConns int64
	}{
		{"short 429 closed unread, drained: connection kept", true, "/recover", false, 1},
		{"short 429 closed unread, not drained: connection lost", false, "/recover", false, 2},
		{"long 429 read to its end, drained: connection kept", true, "/long429", true, 1},
		{"long 429 closed unread, drained: connection lost", true, "/long429", false, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, longBody := newDrainTestServer(t)
			base := newBase(0)
			defer base.CloseIdleConnections()
			var rt http.RoundTripper = base
			if tc.drain {
				rt = drain429{base: base}
			}
			c := &http.Client{Transport: rt, CheckRedirect: noRedirect}

			resp, err := c.Get(srv.url(tc.path))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "0" {
				t.Fatalf("first answer: %d, Retry-After %q; want 429, \"0\"", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if tc.read {
				body, err := io.ReadAll(resp.Body)
				want := throttleBody
				if tc.path == "/long429" {
					want = longBody
				}
				if err != nil || !bytes.Equal(body, want) {
					t.Fatalf("429 body: %d bytes, %v; want the %d bytes sent", len(body), err, len(want))
				}
			}
			resp.Body.Close()

			resp, err = c.Get(srv.url("/ok"))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(body, okBody) {
				t.Fatalf("second answer: %d %q, %v; want 200 and okBody", resp.StatusCode, body, err)
			}
			if got := srv.hits.Load(); got != 2 {
				t.Errorf("server saw %d requests, want 2", got)
			}
			if got := srv.conns.Load(); got != tc.wantConns {
				t.Errorf("server accepted %d connections, want %d", got, tc.wantConns)
			}
		})
	}
}

// TestDrain429Body checks that drain429 hands back a short 429's body and
// header as sent.
func TestDrain429Body(t *testing.T) {
	srv, _ := newDrainTestServer(t)
	base := newBase(0)
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: drain429{base: base}, CheckRedirect: noRedirect}
	resp, err := c.Get(srv.url("/recover"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || !bytes.Equal(body, throttleBody) ||
		resp.Header.Get("X-Ms-Request-Id") != benchRequestID {
		t.Fatalf("got %d %q (request ID %q), %v; want 429, throttleBody, %q",
			resp.StatusCode, body, resp.Header.Get("X-Ms-Request-Id"), err, benchRequestID)
	}
}

// TestRecoveredConnections runs one recovered request (a 429 with
// "Retry-After: 0", then 200) through the contenders of scenario 2 and
// counts the server's connections: rr-budget re-dials (R12 closes the 429's
// body unread), rr-drained and the peers do not. This is what conns/op
// shows in scenarios 2 and 3.
func TestRecoveredConnections(t *testing.T) {
	want := map[string]int64{"rr-budget": 2, "rr-drained": 1, "retryablehttp": 1, "azcore": 1, "failsafe": 1}
	for _, spec := range implSpecs {
		w, ok := want[spec.name]
		if !ok {
			continue
		}
		t.Run(spec.name, func(t *testing.T) {
			srv := newBenchServer(t)
			im := spec.make(newBase(0))
			defer im.close()
			st, err := im.do(im.sequence(context.Background()), srv.url("/recover"))
			if err != nil || st != http.StatusOK {
				t.Fatalf("status %d, %v; want 200", st, err)
			}
			if got := srv.hits.Load(); got != 2 {
				t.Errorf("server saw %d requests, want 2", got)
			}
			if got := srv.conns.Load(); got != w {
				t.Errorf("server accepted %d connections, want %d", got, w)
			}
		})
	}
}
