package readrecovery

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pass-through-unchanged: a real 101 Switching Protocols upgrade over
// loopback through a Transport with a Budget: the response body stays the
// io.ReadWriteCloser net/http made it, and the upgraded connection carries
// bytes both ways.
func TestUpgradeBodyStaysWritable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Kept: yes\r\n\r\n")
		rw.Flush()
		line, err := rw.ReadString('\n')
		if err != nil {
			return
		}
		rw.WriteString("echo " + line)
		rw.Flush()
	}))
	defer srv.Close()
	client := &http.Client{Transport: New(nil)}
	defer client.CloseIdleConnections()
	b := NewBudget("upgrade")
	req, err := http.NewRequestWithContext(WithBudget(context.Background(), b), http.MethodGet, srv.URL+"/ws", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	assert.Equal(t, "yes", resp.Header.Get("X-Kept"), "headers untouched")
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the 101 body is still writable: %T", resp.Body)
	defer rwc.Close()
	_, err = io.WriteString(rwc, "ping\n")
	require.NoError(t, err)
	got, err := bufio.NewReader(rwc).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo ping\n", got)
	assert.Equal(t, 1, b.Report().Requests)
}

// pass-through-unchanged: with a Budget, a response's trailers arrive as
// the base gave them, and a body that is not writable does not become so.
func TestTrailersPassThrough(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(200)
		io.WriteString(w, "data")
		w.Header().Set("X-Checksum", "abc")
	}))
	defer srv.Close()
	client := &http.Client{Transport: New(nil)}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(WithBudget(context.Background(), NewBudget("t")), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, writable := resp.Body.(io.Writer)
	assert.False(t, writable)
	assert.Equal(t, "data", drain(resp))
	assert.Equal(t, http.Header{"X-Checksum": {"abc"}}, resp.Trailer)
}
