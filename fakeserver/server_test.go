package fakeserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestSearchIndex(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			c, base := m.reach(t, s)

			resp, body := do(t, c, "GET", base+"/indexes/hotels?api-version=2024-07-01", nil)
			assert.Equal(t, 404, resp.StatusCode)
			assert.JSONEq(t, `{"error":{"code":"ResourceNotFound","message":"No index with the name 'hotels' was found in the service."}}`, string(body))
			assert.Equal(t, "ResourceNotFound", resp.Header.Get("x-ms-error-code"))

			def := []byte(`{"name":"hotels","fields":[{"name":"id","type":"Edm.String","key":true}]}`)
			resp, body = do(t, c, "PUT", base+"/indexes/hotels?api-version=2024-07-01", def, "Content-Type", "application/json")
			assert.Equal(t, 201, resp.StatusCode)
			assert.Equal(t, "201 Created", resp.Status)
			etag := resp.Header.Get("ETag")
			assert.Equal(t, `"0x8D0000000000001"`, etag)
			assert.JSONEq(t, `{"@odata.etag":"\"0x8D0000000000001\"","name":"hotels","fields":[{"name":"id","type":"Edm.String","key":true}]}`, string(body))
			assert.Equal(t, "4.0", resp.Header.Get("OData-Version"))

			resp, body2 := do(t, c, "GET", base+"/indexes/hotels?api-version=2024-07-01", nil)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, string(body), string(body2), "GET returns the definition PUT echoed")
			assert.Equal(t, etag, resp.Header.Get("ETag"))

			// OData key form and an update: 200.
			resp, _ = do(t, c, "PUT", base+"/indexes('hotels')", []byte(`{"fields":[]}`))
			assert.Equal(t, 200, resp.StatusCode)
			stored, ok := s.Index("hotels")
			require.True(t, ok)
			assert.JSONEq(t, `{"@odata.etag":"\"0x8D0000000000002\"","name":"hotels","fields":[]}`, string(stored))

			// Create-only and minimal answers.
			resp, _ = do(t, c, "PUT", base+"/indexes/hotels", []byte(`{}`), "If-None-Match", "*")
			assert.Equal(t, 412, resp.StatusCode)
			resp, body = do(t, c, "PUT", base+"/indexes/motels", []byte(`{}`), "Prefer", "return=minimal")
			assert.Equal(t, 204, resp.StatusCode)
			assert.Empty(t, body)

			// Bad bodies: 400 with a JSON error, nothing stored.
			for _, bad := range []string{`{`, `[1]`, `null`, `{"name":"other"}`, `{"name":1}`, `{} {}`, ``} {
				resp, body = do(t, c, "PUT", base+"/indexes/bad", []byte(bad))
				assert.Equal(t, 400, resp.StatusCode, bad)
				var e jsonErrorBody
				assert.NoError(t, json.Unmarshal(body, &e), bad)
				assert.Equal(t, "InvalidRequestParameter", e.Error.Code, bad)
			}
			_, ok = s.Index("bad")
			assert.False(t, ok)

			// Other methods and paths.
			resp, _ = do(t, c, "DELETE", base+"/indexes/hotels", nil)
			assert.Equal(t, 405, resp.StatusCode)
			resp, _ = do(t, c, "GET", base+"/indexes/a/b", nil)
			assert.Equal(t, 404, resp.StatusCode)
			assert.Equal(t, RouteOther, s.Requests()[len(s.Requests())-1].Route)
		})
	}
}

func TestCommonHeaders(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			c, base := m.reach(t, s)
			seen := map[string]bool{}
			for _, path := range []string{"/indexes/x", "/indexes/x", "/files", "/c/b", "/nowhere"} {
				resp, _ := do(t, c, "GET", base+path, nil)
				id := resp.Header.Get("x-ms-request-id")
				assert.Regexp(t, `^[0-9a-f]{8}-0000-4000-8000-[0-9a-f]{12}$`, id)
				assert.False(t, seen[id], "request ID %s reused", id)
				seen[id] = true
				if strings.HasPrefix(path, "/indexes/") {
					assert.Equal(t, id, resp.Header.Get("request-id"))
				} else {
					assert.Empty(t, resp.Header.Get("request-id"))
				}
				assert.Equal(t, []string{"Sun, 06 Nov 1994 08:49:40 GMT"}, resp.Header.Values("Date"), "Date comes from the server clock")
			}
			for i, r := range s.Requests() {
				assert.Equal(t, i+1, r.Seq)
				assert.True(t, seen[r.RequestID], "the ledger records the ID answered")
			}
		})
	}
}

type fileList struct {
	Value    []File `json:"value"`
	Next     string `json:"next"`
	NextLink string `json:"nextLink"`
}

func TestFiles(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			c, base := m.reach(t, s)

			resp, body := do(t, c, "POST", base+"/files", []byte("hello"), "x-ms-file-name", "a.txt")
			require.Equal(t, 201, resp.StatusCode)
			var f File
			require.NoError(t, json.Unmarshal(body, &f))
			assert.Equal(t, File{ID: "file-000001", Name: "a.txt", Digest: sha([]byte("hello")), Bytes: 5, CreatedAt: t0.Unix()}, f)
			content, ok := s.FileContent(f.Digest)
			assert.True(t, ok)
			assert.Equal(t, "hello", string(content))

			for i := 2; i <= 25; i++ {
				s.AddFile(fmt.Sprintf("f%02d", i), []byte{byte(i)})
			}

			// Default limit 10, three pages, by cursor then by nextLink.
			var ids []string
			next := base + "/files?api-version=1"
			pages := 0
			for next != "" {
				resp, body = do(t, c, "GET", next, nil)
				require.Equal(t, 200, resp.StatusCode, string(body))
				var page fileList
				require.NoError(t, json.Unmarshal(body, &page))
				pages++
				for _, f := range page.Value {
					ids = append(ids, f.ID)
				}
				if page.Next == "" {
					assert.Empty(t, page.NextLink)
					break
				}
				assert.Equal(t, page.Value[len(page.Value)-1].ID, page.Next)
				u, err := url.Parse(page.NextLink)
				require.NoError(t, err)
				assert.Equal(t, url.Values{"after": {page.Next}, "limit": {"10"}, "api-version": {"1"}}, u.Query())
				next = base + u.RequestURI()
			}
			assert.Equal(t, 3, pages)
			require.Len(t, ids, 25)
			for i, id := range ids {
				assert.Equal(t, fmt.Sprintf("file-%06d", i+1), id, "stable upload order")
			}

			_, body = do(t, c, "GET", base+"/files?limit=7&after=file-000020", nil)
			var page fileList
			require.NoError(t, json.Unmarshal(body, &page))
			assert.Len(t, page.Value, 5)
			assert.Empty(t, page.Next, "the last page has no cursor")

			_, body = do(t, c, "GET", base+"/files?limit=5&after=file-000020", nil)
			require.NoError(t, json.Unmarshal(body, &page))
			assert.Len(t, page.Value, 5)
			assert.Empty(t, page.Next, "a page ending exactly at the end has no cursor")

			_, body = do(t, c, "GET", base+"/files?limit=5000", nil)
			require.NoError(t, json.Unmarshal(body, &page))
			assert.Len(t, page.Value, 25, "limit is clamped to 1000, not refused")

			for _, q := range []string{"limit=0", "limit=-1", "limit=x", "after=file-999999", "after=nope", "%zz"} {
				resp, body = do(t, c, "GET", base+"/files?"+q, nil)
				assert.Equal(t, 400, resp.StatusCode, q)
				assert.Contains(t, string(body), `"error"`, q)
			}
			resp, _ = do(t, c, "POST", base+"/files", nil, "x-ms-file-name", strings.Repeat("n", 2000))
			assert.Equal(t, 400, resp.StatusCode)
			resp, _ = do(t, c, "DELETE", base+"/files", nil)
			assert.Equal(t, 405, resp.StatusCode)
			resp, _ = do(t, c, "GET", base+"/files/file-000001", nil)
			assert.Equal(t, 404, resp.StatusCode)
		})
	}
}

func TestBlobs(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newServer(t, fixedClock())
			c, base := m.reach(t, s)

			resp, body := do(t, c, "GET", base+"/checkpoints/source.json", nil)
			assert.Equal(t, 404, resp.StatusCode)
			assert.Equal(t, "application/xml", resp.Header.Get("Content-Type"))
			assert.Equal(t, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Error><Code>BlobNotFound</Code><Message>The specified blob does not exist.</Message></Error>`, string(body))

			data := []byte(`{"checkpoint":1}`)
			resp, body = do(t, c, "PUT", base+"/checkpoints/dir/source.json", data,
				"x-ms-blob-type", "BlockBlob", "Content-Type", "application/json", "x-ms-version", "2023-11-03")
			assert.Equal(t, 201, resp.StatusCode)
			assert.Empty(t, body)
			etag := resp.Header.Get("ETag")
			assert.Equal(t, `"0x8D0000000000001"`, etag)
			assert.Equal(t, "Sun, 06 Nov 1994 08:49:40 GMT", resp.Header.Get("Last-Modified"))
			assert.Equal(t, "2023-11-03", resp.Header.Get("x-ms-version"))
			assert.NotEmpty(t, resp.Header.Get("Content-MD5"))

			resp, body = do(t, c, "GET", base+"/checkpoints/dir/source.json", nil)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, data, body)
			assert.Equal(t, etag, resp.Header.Get("ETag"))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, int64(len(data)), resp.ContentLength)

			// Conditional requests.
			resp, _ = do(t, c, "PUT", base+"/checkpoints/dir/source.json", data, "If-None-Match", "*")
			assert.Equal(t, 409, resp.StatusCode)
			resp, _ = do(t, c, "PUT", base+"/checkpoints/dir/source.json", data, "If-Match", `"0xwrong"`)
			assert.Equal(t, 412, resp.StatusCode)
			resp, _ = do(t, c, "GET", base+"/checkpoints/dir/source.json", nil, "If-None-Match", etag)
			assert.Equal(t, 304, resp.StatusCode)
			resp, _ = do(t, c, "PUT", base+"/checkpoints/dir/source.json", []byte("v2"), "If-Match", etag)
			assert.Equal(t, 201, resp.StatusCode)
			got, etag2, ok := s.Blob("checkpoints", "dir/source.json")
			assert.True(t, ok)
			assert.Equal(t, "v2", string(got))
			assert.NotEqual(t, etag, etag2, "every PUT gets a new ETag")

			seeded := s.PutBlob("c", "generated.json", []byte("gen"))
			resp, body = do(t, c, "GET", base+"/c/generated.json", nil)
			assert.Equal(t, "gen", string(body))
			assert.Equal(t, seeded, resp.Header.Get("ETag"))

			// Container operations are not blob routes.
			resp, _ = do(t, c, "PUT", base+"/c?restype=container", nil)
			assert.Equal(t, 404, resp.StatusCode)
			resp, _ = do(t, c, "DELETE", base+"/c/generated.json", nil)
			assert.Equal(t, 405, resp.StatusCode)
			assert.Equal(t, []string{"blob.get", "blob.put", "blob.get", "blob.put", "blob.put", "blob.get", "blob.put", "blob.get", "other", "other"},
				routesOf(s.Requests()))
		})
	}
}

func routesOf(reqs []Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Route)
	}
	return out
}

func TestClassify(t *testing.T) {
	tests := []struct {
		method, target, route string
	}{
		{"PUT", "/indexes/a", RouteSearchPut},
		{"GET", "/indexes/a?api-version=1", RouteSearchGet},
		{"GET", "/indexes('a')", RouteSearchGet},
		{"GET", "/indexes%2Fa", RouteSearchGet}, // decoded path
		{"GET", "/indexes/", RouteOther},
		{"GET", "/indexes", RouteOther},
		{"POST", "/indexes/a", RouteOther},
		{"GET", "/indexes/a/docs", RouteOther},
		{"POST", "/files", RouteFileUpload},
		{"GET", "/files?limit=2", RouteFileList},
		{"PUT", "/files", RouteOther},
		{"GET", "/files/x", RouteOther},
		{"PUT", "/c/b", RouteBlobPut},
		{"GET", "/c/b/c/d", RouteBlobGet},
		{"PUT", "/c?restype=container", RouteOther},
		{"GET", "/c/b?restype=container&comp=list", RouteOther},
		{"HEAD", "/c/b", RouteOther},
		{"GET", "/c", RouteOther},
		{"GET", "/c/", RouteOther},
		{"GET", "/", RouteOther},
		{"GET", "//x", RouteOther},
	}
	// Every route is the same in the plain layout and behind the account
	// segment (Azurite's layout).
	for _, prefix := range []string{"", "/devstoreaccount1"} {
		for _, tc := range tests {
			target := prefix + tc.target
			u, err := url.Parse(target)
			require.NoError(t, err)
			got := classify(tc.method, servicePath(DefaultAccount, u.Path), u.RawQuery)
			assert.Equal(t, tc.route, got, "%s %s", tc.method, target)
		}
	}
}

// TestServicePath pins how the account segment is recognised: only a first
// segment exactly equal to the account, which then always wins.
func TestServicePath(t *testing.T) {
	tests := []struct {
		account, path, want string
	}{
		{DefaultAccount, "/devstoreaccount1/checkpoints/a.json", "/checkpoints/a.json"},
		{DefaultAccount, "/checkpoints/a.json", "/checkpoints/a.json"},
		{DefaultAccount, "/devstoreaccount1/files", "/files"},
		{DefaultAccount, "/devstoreaccount1", "/"},
		{DefaultAccount, "/devstoreaccount1/", "/"},
		{DefaultAccount, "/devstoreaccount1/devstoreaccount1/b", "/devstoreaccount1/b"},
		{DefaultAccount, "/devstoreaccount10/c/b", "/devstoreaccount10/c/b"},
		{DefaultAccount, "/Devstoreaccount1/c/b", "/Devstoreaccount1/c/b"},
		{DefaultAccount, "/c/devstoreaccount1/b", "/c/devstoreaccount1/b"},
		{"acct", "/acct/c/b", "/c/b"},
		{"acct", "/devstoreaccount1/c/b", "/devstoreaccount1/c/b"},
		{"", "/devstoreaccount1/c/b", "/devstoreaccount1/c/b"},
		{DefaultAccount, "", ""},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, servicePath(tc.account, tc.path), "account %q path %q", tc.account, tc.path)
	}
}

// TestOddInput sends what a broken or hostile client might, over a real
// connection: the server answers, never panics.
func TestOddInput(t *testing.T) {
	s := newServer(t, fixedClock())
	base, err := s.Start()
	require.NoError(t, err)

	head, _ := rawExchange(t, base, "GET /%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.True(t, strings.HasPrefix(head, "HTTP/1.1 400 "), head)

	head, _ = rawExchange(t, base, "GET /\x01\x02 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.True(t, strings.HasPrefix(head, "HTTP/1.1 400 "), head)

	head, _ = rawExchange(t, base, "GET /c/b HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 2<<20)+"\r\nConnection: close\r\n\r\n")
	assert.True(t, strings.HasPrefix(head, "HTTP/1.1 431 "), head)

	head, body := rawExchange(t, base, "BREW /pot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.True(t, strings.HasPrefix(head, "HTTP/1.1 404 "), head)
	assert.Contains(t, string(body), `"ResourceNotFound"`)

	head, _ = rawExchange(t, base, "PUT /indexes/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{{{")
	assert.True(t, strings.HasPrefix(head, "HTTP/1.1 400 "), head)

	// A request body cut short: the server answers 400 or the client is gone.
	c := newClient(t, nil)
	req, _ := http.NewRequest("POST", base+"/files", io.MultiReader(strings.NewReader("abc"), errReader{}))
	_, err = c.Do(req)
	assert.Error(t, err)

	// Still serving.
	resp, _ := do(t, c, "GET", base+"/files", nil)
	assert.Equal(t, 200, resp.StatusCode)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestBodyTooLarge(t *testing.T) {
	s := newServer(t)
	s.maxBody = 1024 // stands for maxRequestBody, which is slow to fill under -race
	c := newClient(t, s.Transport())
	resp, body := do(t, c, "POST", "http://fake.test/files", bytes.Repeat([]byte("x"), 1025))
	assert.Equal(t, 413, resp.StatusCode)
	assert.Contains(t, string(body), "RequestBodyTooLarge")
	assert.Empty(t, s.Files())
	assert.Equal(t, "", s.Requests()[0].BodyDigest)
}

func TestCloseAndShutdown(t *testing.T) {
	s := New()
	base, err := s.Start()
	require.NoError(t, err)
	assert.Equal(t, base, s.URL())
	_, err = s.Start()
	assert.Error(t, err, "a server listens once")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.Start()
	assert.ErrorIs(t, err, ErrServerClosed)
	_, err = s.Transport().RoundTrip(mustRequest(t, "GET", "http://fake.test/files"))
	assert.ErrorIs(t, err, ErrServerClosed)

	s2 := New()
	_, err = s2.Start()
	require.NoError(t, err)
	require.NoError(t, s2.Shutdown(t.Context()))
	c := newClient(t, nil)
	_, err = c.Get(s2.URL() + "/files")
	assert.Error(t, err, "nothing listens after Shutdown")

	_, err = New().Listen("256.0.0.1:bad")
	assert.Error(t, err)
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	return req
}

func TestSeedingErrors(t *testing.T) {
	s := New()
	assert.Error(t, s.PutIndex("a/b", []byte(`{}`)))
	assert.Error(t, s.PutIndex("a", []byte(`[`)))
	assert.NoError(t, s.PutIndex("a", []byte(`{"fields":[]}`)))
	_, ok := s.Index("a")
	assert.True(t, ok)
	_, _, ok = s.Blob("no", "such")
	assert.False(t, ok)
	assert.Empty(t, s.Requests(), "seeding is not a request")
	assert.Nil(t, s.Upstream())
}
