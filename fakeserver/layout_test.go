package fakeserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledgerLine is the part of a ledger entry the layout tests pin.
type ledgerLine struct {
	Method, Route, Path string
	Status              int
}

func linesOf(reqs []Request) []ledgerLine {
	out := make([]ledgerLine, len(reqs))
	for i, r := range reqs {
		out[i] = ledgerLine{r.Method, r.Route, r.Path, r.Status}
	}
	return out
}

// TestAccountLayout: a blob seeded with PutBlob("checkpoints", ...) is read
// through Azurite's path-style URL (azblob's layout, /devstoreaccount1/...)
// and through the plain layout; a PUT through either layout lands in the
// same container; the File and Search endpoints work behind the account
// segment too, and the File list's nextLink keeps it.
func TestAccountLayout(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			c, base := m.reach(t, s)
			etag := s.PutBlob("checkpoints", "c1/a.json", []byte(`{"step":1}`))

			resp, body := do(t, c, "GET", base+"/devstoreaccount1/checkpoints/c1/a.json", nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, `{"step":1}`, string(body))
			assert.Equal(t, etag, resp.Header.Get("ETag"))
			resp, body = do(t, c, "GET", base+"/checkpoints/c1/a.json", nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, `{"step":1}`, string(body))

			resp, _ = do(t, c, "PUT", base+"/devstoreaccount1/checkpoints/b.json", []byte("B"), "x-ms-blob-type", "BlockBlob")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			got, _, ok := s.Blob("checkpoints", "b.json")
			require.True(t, ok, "a PUT through the account layout lands in container checkpoints")
			assert.Equal(t, "B", string(got))
			_, _, ok = s.Blob("devstoreaccount1", "checkpoints/b.json")
			assert.False(t, ok, "the account segment is not a container")

			// A container literally named like the account: the account
			// segment wins, so it is reached only behind it.
			s.PutBlob("devstoreaccount1", "x", []byte("X"))
			resp, body = do(t, c, "GET", base+"/devstoreaccount1/devstoreaccount1/x", nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "X", string(body))
			resp, _ = do(t, c, "GET", base+"/devstoreaccount1/x", nil)
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/devstoreaccount1/x is the account's container x, no blob")

			s.AddFile("f1", []byte("1"))
			s.AddFile("f2", []byte("2"))
			resp, body = do(t, c, "GET", base+"/devstoreaccount1/files?limit=1", nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			var page fileListPage
			require.NoError(t, json.Unmarshal(body, &page))
			assert.Equal(t, base+"/devstoreaccount1/files?after=file-000001&limit=1", page.NextLink)
			resp, _ = do(t, c, "GET", page.NextLink, nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			resp, _ = do(t, c, "POST", base+"/devstoreaccount1/files", []byte("3"))
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Len(t, s.Files(), 3)

			resp, _ = do(t, c, "PUT", base+"/devstoreaccount1/indexes/hotels", []byte(`{"fields":[]}`))
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			_, ok = s.Index("hotels")
			assert.True(t, ok)

			assert.Equal(t, []ledgerLine{
				{"GET", RouteBlobGet, "/devstoreaccount1/checkpoints/c1/a.json", 200},
				{"GET", RouteBlobGet, "/checkpoints/c1/a.json", 200},
				{"PUT", RouteBlobPut, "/devstoreaccount1/checkpoints/b.json", 201},
				{"GET", RouteBlobGet, "/devstoreaccount1/devstoreaccount1/x", 200},
				{"GET", RouteOther, "/devstoreaccount1/x", 404},
				{"GET", RouteFileList, "/devstoreaccount1/files", 200},
				{"GET", RouteFileList, "/devstoreaccount1/files", 200},
				{"POST", RouteFileUpload, "/devstoreaccount1/files", 201},
				{"PUT", RouteSearchPut, "/devstoreaccount1/indexes/hotels", 201},
			}, linesOf(s.Requests()), "the ledger keeps the whole path")
		})
	}
}

// TestAccountLayoutScript: a rule's path prefix sees the whole path, account
// segment included, as in front of Azurite.
func TestAccountLayoutScript(t *testing.T) {
	s := newServer(t, fixedClock())
	s.Script().Add(RouteBlobGet, Throttle(RetryAfterSeconds(1)), MatchPath("/devstoreaccount1/checkpoints/"), Times(1))
	s.PutBlob("checkpoints", "a.json", []byte("A"))
	c := newClient(t, s.Transport())
	for _, target := range []string{"/checkpoints/a.json", "/devstoreaccount1/checkpoints/a.json", "/devstoreaccount1/checkpoints/a.json"} {
		do(t, c, "GET", "http://fake.test"+target, nil)
	}
	assert.Equal(t, []ledgerLine{
		{"GET", RouteBlobGet, "/checkpoints/a.json", 200},
		{"GET", RouteBlobGet, "/devstoreaccount1/checkpoints/a.json", 429},
		{"GET", RouteBlobGet, "/devstoreaccount1/checkpoints/a.json", 200},
	}, linesOf(s.Requests()))
}

// TestWithAccount: another account name, and "" for the plain layout only.
func TestWithAccount(t *testing.T) {
	tests := []struct {
		name    string
		account string
		target  string
		status  int
	}{
		{"own account", "myaccount", "/myaccount/checkpoints/a.json", 200},
		{"own account, plain layout", "myaccount", "/checkpoints/a.json", 200},
		{"own account, Azurite's name is a container", "myaccount", "/devstoreaccount1/checkpoints/a.json", 404},
		{"no account", "", "/devstoreaccount1/checkpoints/a.json", 404},
		{"no account, plain layout", "", "/checkpoints/a.json", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, WithAccount(tc.account))
			s.PutBlob("checkpoints", "a.json", []byte("A"))
			resp, _ := do(t, newClient(t, s.Transport()), "GET", "http://fake.test"+tc.target, nil)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, []ledgerLine{{"GET", RouteBlobGet, tc.target, tc.status}}, linesOf(s.Requests()))
		})
	}
}
