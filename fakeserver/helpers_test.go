package fakeserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is a fixed server clock: Retry-After dates computed from it are exact.
var t0 = time.Date(1994, time.November, 6, 8, 49, 40, 0, time.UTC)

func fixedClock() Option { return WithClock(func() time.Time { return t0 }) }

// mode is one way to reach a server: over loopback or in-process.
type mode struct {
	name  string
	reach func(t *testing.T, s *Server) (*http.Client, string)
}

var modes = []mode{
	{"loopback", func(t *testing.T, s *Server) (*http.Client, string) {
		t.Helper()
		base, err := s.Start()
		require.NoError(t, err)
		return newClient(t, nil), base
	}},
	{"in-process", func(t *testing.T, s *Server) (*http.Client, string) {
		return newClient(t, s.Transport()), "http://fake.test"
	}},
}

// newClient returns a client that never follows redirects; with a nil rt,
// it has its own network transport, closed at cleanup.
func newClient(t *testing.T, rt http.RoundTripper) *http.Client {
	t.Helper()
	if rt == nil {
		tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	}
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// newServer returns a server closed at cleanup.
func newServer(t *testing.T, opts ...Option) *Server {
	t.Helper()
	s := New(opts...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// do sends one request and returns the response with its whole body.
func do(t *testing.T, c *http.Client, method, url string, body []byte, headers ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "%s %s: reading body", method, url)
	return resp, b
}

// rawExchange writes raw request bytes to the server's listener and returns
// the response's header block exactly as received (status line and header
// lines, CRLF-terminated) and the body.
func rawExchange(t *testing.T, base, request string) (head string, body []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	var hb strings.Builder
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "reading header (so far %q)", hb.String())
		hb.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	body, _ = io.ReadAll(br)
	return hb.String(), body
}

// recTB records assertion failures.
type recTB struct{ errs []string }

func (r *recTB) Helper() {}
func (r *recTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// headerLines returns the lines of a raw header block that start with key
// (case-sensitive, as sent).
func headerLines(head, key string) []string {
	var out []string
	for _, l := range strings.Split(head, "\r\n") {
		if strings.HasPrefix(l, key+": ") {
			out = append(out, l)
		}
	}
	return out
}
