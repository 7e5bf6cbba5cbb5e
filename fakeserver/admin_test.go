package fakeserver

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdminRoutesAreNotTraffic: probes of the admin routes, before and
// between Azure requests, neither use up a rule's nth count nor enter the
// ledger nor reach the observer. The rule "*" nth=2 fires on the second
// Azure request, whatever the probes.
func TestAdminRoutesAreNotTraffic(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var mu sync.Mutex
			var observed []int
			s := newServer(t, fixedClock(), WithObserver(func(r Request) {
				mu.Lock()
				observed = append(observed, r.Seq)
				mu.Unlock()
			}))
			s.Script().Add(RouteAny, Throttle(RetryAfterSeconds(1)), Nth(2))
			c, base := m.reach(t, s)

			probe := func(method, path string, want int) []byte {
				t.Helper()
				resp, body := do(t, c, method, base+path, nil)
				assert.Equal(t, want, resp.StatusCode, "%s %s", method, path)
				assert.Empty(t, resp.Header.Get("x-ms-request-id"), "an admin answer is not Azure's")
				return body
			}
			body := probe("GET", "/_fakeserver/health", 200)
			assert.JSONEq(t, `{"status":"ok","requests":0}`, string(body))
			probe("HEAD", "/_fakeserver/health", 200)
			probe("POST", "/_fakeserver/health", 405)
			probe("GET", "/_fakeserver/nope", 404)
			probe("GET", "/_fakeserver", 404)
			probe("GET", "/_fakeserver/ledger", 200)

			resp, _ := do(t, c, "GET", base+"/files", nil)
			assert.Equal(t, 200, resp.StatusCode, "the first Azure request")
			body = probe("GET", "/_fakeserver/health", 200)
			assert.JSONEq(t, `{"status":"ok","requests":1}`, string(body))
			resp, _ = do(t, c, "GET", base+"/c/b", nil)
			assert.Equal(t, 429, resp.StatusCode, "nth=2 is the second Azure request, not the second request")
			ledgerJSON := probe("GET", "/_fakeserver/ledger", 200)
			resp, _ = do(t, c, "GET", base+"/files", nil)
			assert.Equal(t, 200, resp.StatusCode)

			reqs := s.Requests()
			want := []Request{
				{Seq: 1, Ordinal: 1, Method: "GET", Route: RouteFileList, Path: "/files", Arrived: t0,
					Status: 200, Rule: -1, BodyDigest: sha(nil)},
				{Seq: 2, Ordinal: 1, Method: "GET", Route: RouteBlobGet, Path: "/c/b", Arrived: t0,
					Status: 429, Fault: "429 retry-after=seconds(1)", Rule: 0, BodyDigest: sha(nil)},
				{Seq: 3, Ordinal: 2, Method: "GET", Route: RouteFileList, Path: "/files", Arrived: t0,
					Status: 200, Rule: -1, BodyDigest: sha(nil)},
			}
			require.Len(t, reqs, len(want))
			for i := range reqs {
				assert.NotEmpty(t, reqs[i].RequestID)
				reqs[i].RequestID = ""
			}
			assert.Equal(t, want, reqs, "exactly the Azure requests")
			assert.Equal(t, 3, s.Count(RouteAny, ""))
			mu.Lock()
			assert.Equal(t, []int{1, 2, 3}, observed, "the observer sees no probe")
			mu.Unlock()

			// The ledger served over HTTP is the ledger as it was then.
			var served ledgerBody
			require.NoError(t, json.Unmarshal(ledgerJSON, &served))
			require.Len(t, served.Requests, 2)
			served.Requests[0].RequestID, served.Requests[1].RequestID = "", ""
			assert.Equal(t, want[:2], served.Requests)
		})
	}
}

// TestAdminLedgerJSON pins the JSON keys of a ledger entry.
func TestAdminLedgerJSON(t *testing.T) {
	s := newServer(t, fixedClock())
	c := newClient(t, s.Transport())
	do(t, c, "PUT", "http://fake.test/c/b?sig=SECRET", []byte("x"))
	_, body := do(t, c, "GET", "http://fake.test/_fakeserver/ledger", nil)
	id := s.Requests()[0].RequestID
	assert.JSONEq(t, `{"requests":[{"seq":1,"ordinal":1,"method":"PUT","route":"blob.put","path":"/c/b",
		"query_keys":["sig"],"arrived":"1994-11-06T08:49:40Z","request_id":"`+id+`","status":201,"rule":-1,
		"body_digest":"`+sha([]byte("x"))+`","body_size":1}]}`, string(body))
	assert.NotContains(t, string(body), "SECRET")
}

// TestAdminInProxyMode: the proxy answers the admin routes itself; the
// upstream never sees them, and the script's nth counts Azure requests only.
func TestAdminInProxyMode(t *testing.T) {
	up := newServer(t, fixedClock())
	up.PutBlob("c", "b", []byte("B"))
	script := NewScript()
	script.Add(RouteBlobGet, Throttle(RetryAfterSeconds(1)), Nth(2))
	p := NewProxy(mustURL(t, "http://upstream.test"), script, fixedClock(), WithUpstreamTransport(up.Transport()))
	t.Cleanup(func() { _ = p.Close() })
	c := newClient(t, p.Transport())

	var statuses []int
	for _, path := range []string{"/_fakeserver/health", "/devstoreaccount1/c/b", "/_fakeserver/health", "/devstoreaccount1/c/b", "/devstoreaccount1/c/b"} {
		resp, _ := do(t, c, "GET", "http://proxy.test"+path, nil)
		statuses = append(statuses, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 200, 429, 200}, statuses)
	assert.Equal(t, []ledgerLine{
		{"GET", RouteBlobGet, "/devstoreaccount1/c/b", 200},
		{"GET", RouteBlobGet, "/devstoreaccount1/c/b", 429},
		{"GET", RouteBlobGet, "/devstoreaccount1/c/b", 200},
	}, linesOf(p.Requests()))
	assert.Equal(t, []ledgerLine{
		{"GET", RouteBlobGet, "/devstoreaccount1/c/b", 200},
		{"GET", RouteBlobGet, "/devstoreaccount1/c/b", 200},
	}, linesOf(up.Requests()), "the upstream sees the forwarded Azure requests only")
}
