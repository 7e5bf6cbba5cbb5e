package fakeserver

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzServeHTTP: whatever the method, path, query, headers and body, the
// server answers with a status and never panics (a token bucket keyed by
// the path's account included), and the ledger holds the
// request without its query values; an admin path answers without entering
// the ledger.
func FuzzServeHTTP(f *testing.F) {
	f.Add("PUT", "/indexes/a", "api-version=1", "", []byte(`{"fields":[]}`))
	f.Add("GET", "/indexes('a')", "", "", []byte(nil))
	f.Add("POST", "/files", "sig=SECRET", "name\x00", []byte("x"))
	f.Add("GET", "/files", "limit=0&after=%zz", "", []byte(nil))
	f.Add("GET", "/files", "limit=99999999999999999999", "", []byte(nil))
	f.Add("PUT", "/c/b/../..", "restype=container", "", []byte("x"))
	f.Add("PUT", "/indexes/a", "", "", []byte(`{"name":{"x":1}}`))
	f.Add("PUT", "/indexes/a", "", "", []byte(`{"a":1e999}`))
	f.Add("\x00", "", "", "", []byte(nil))
	f.Add("GET", "/_fakeserver/health", "", "", []byte(nil))
	f.Add("GET", "/_fakeserver/ledger", "sig=SECRET", "", []byte(nil))
	f.Add("PUT", "/devstoreaccount1/c/b", "", "", []byte("x"))
	f.Add("GET", "/devstoreaccount1/files", "limit=1", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, rawQuery, fileName string, body []byte) {
		s := New()
		defer s.Close()
		s.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(1)), Nth(2)).
			Add(RouteAny, ServerBusy(), TokenBucket(1, 1)) // the path's account is the bucket's key
		rt := s.Transport()
		admin := isAdmin(path)
		for range 2 {
			req := &http.Request{
				Method: method,
				URL:    &url.URL{Scheme: "http", Host: "fake.test", Path: path, RawQuery: rawQuery},
				Header: http.Header{"X-Ms-File-Name": {fileName}, "If-Match": {fileName}},
				Body:   io.NopCloser(bytes.NewReader(body)),
			}
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err, "round trip")
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.True(t, resp.StatusCode >= 200 && resp.StatusCode <= 599, "status %d", resp.StatusCode)
			if !admin {
				require.NotEmpty(t, resp.Header.Get("x-ms-request-id"), "no request ID")
			}
		}
		want := 2
		if admin {
			want = 0
		}
		require.Len(t, s.Requests(), want, "ledger")
	})
}
