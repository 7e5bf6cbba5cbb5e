package fakeserver

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docSeed is the seed example of docs/fakeserver.md.
const docSeed = `{
  "comment": "a checkpoint, an index and a two-page inventory",
  "indexes": [
    {"name": "hotels", "definition": {"fields": [{"name": "id", "type": "Edm.String", "key": true}]}}
  ],
  "files": [
    {"name": "a.csv", "content": "id,name\n1,x\n"},
    {"name": "b.bin", "content_base64": "AAEC"}
  ],
  "blobs": [
    {"container": "checkpoints", "name": "c1/source.json", "json": {"source": 1}},
    {"container": "checkpoints", "name": "c1/raw.bin", "content_base64": "AAEC",
     "content_type": "application/x-raw"}
  ]
}`

func TestDocSeedMatchesDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/fakeserver.md")
	require.NoError(t, err)
	assert.Contains(t, string(doc), "```json\n"+docSeed+"\n```\n", "docs/fakeserver.md shows docSeed")
}

func TestLoadSeed(t *testing.T) {
	seed, err := LoadSeed(strings.NewReader(docSeed))
	require.NoError(t, err)
	assert.Equal(t, &Seed{
		Indexes: []SeedIndex{{Name: "hotels", Definition: []byte(`{"fields": [{"name": "id", "type": "Edm.String", "key": true}]}`)}},
		Files: []SeedFile{
			{Name: "a.csv", Content: []byte("id,name\n1,x\n")},
			{Name: "b.bin", Content: []byte{0, 1, 2}},
		},
		Blobs: []SeedBlob{
			{Container: "checkpoints", Name: "c1/source.json", Content: []byte(`{"source":1}`), ContentType: "application/json"},
			{Container: "checkpoints", Name: "c1/raw.bin", Content: []byte{0, 1, 2}, ContentType: "application/x-raw"},
		},
	}, seed)

	empty, err := LoadSeed(strings.NewReader(`{}`))
	require.NoError(t, err)
	assert.Equal(t, &Seed{}, empty, "an empty seed is valid")
}

// TestServerSeed: a loaded seed is served through both path layouts, with
// the content types given; seeding sends no request, so the ledger is empty
// and a rule's nth still counts from the first real request.
func TestServerSeed(t *testing.T) {
	seed, err := LoadSeed(strings.NewReader(docSeed))
	require.NoError(t, err)
	s := newServer(t, fixedClock())
	s.Script().Add(RouteBlobGet, Throttle(RetryAfterSeconds(1)), Nth(2))
	require.NoError(t, s.Seed(seed))
	assert.Empty(t, s.Requests(), "seeding is not traffic")

	c := newClient(t, s.Transport())
	resp, body := do(t, c, "GET", "http://fake.test/devstoreaccount1/checkpoints/c1/source.json", nil)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `{"source":1}`, string(body))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	resp, _ = do(t, c, "GET", "http://fake.test/checkpoints/c1/raw.bin", nil)
	assert.Equal(t, 429, resp.StatusCode, "nth=2 is the second request: the seed counted none")
	resp, body = do(t, c, "GET", "http://fake.test/checkpoints/c1/raw.bin", nil)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []byte{0, 1, 2}, body)
	assert.Equal(t, "application/x-raw", resp.Header.Get("Content-Type"))

	resp, body = do(t, c, "GET", "http://fake.test/indexes/hotels", nil)
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"name":"hotels","@odata.etag":"\"0x8D0000000000001\"","fields":[{"name":"id","type":"Edm.String","key":true}]}`, string(body))

	assert.Equal(t, []File{
		{ID: "file-000001", Name: "a.csv", Digest: sha([]byte("id,name\n1,x\n")), Bytes: 12, CreatedAt: t0.Unix()},
		{ID: "file-000002", Name: "b.bin", Digest: sha([]byte{0, 1, 2}), Bytes: 3, CreatedAt: t0.Unix()},
	}, s.Files())
	content, ok := s.FileContent(sha([]byte{0, 1, 2}))
	assert.True(t, ok)
	assert.Equal(t, []byte{0, 1, 2}, content)

	assert.Equal(t, []ledgerLine{
		{"GET", RouteBlobGet, "/devstoreaccount1/checkpoints/c1/source.json", 200},
		{"GET", RouteBlobGet, "/checkpoints/c1/raw.bin", 429},
		{"GET", RouteBlobGet, "/checkpoints/c1/raw.bin", 200},
		{"GET", RouteSearchGet, "/indexes/hotels", 200},
	}, linesOf(s.Requests()))
}

// TestServerSeedChecksFirst: a Seed built in Go with a bad entry stores
// nothing and names the entry.
func TestServerSeedChecksFirst(t *testing.T) {
	s := newServer(t)
	err := s.Seed(&Seed{
		Indexes: []SeedIndex{{Name: "ok", Definition: []byte(`{}`)}},
		Files:   []SeedFile{{Name: "f", Content: []byte("x")}},
		Blobs: []SeedBlob{
			{Container: "c", Name: "b", Content: []byte("x")},
			{Container: "c", Name: "b", Content: []byte("y")},
		},
	})
	var se *LoadError
	require.True(t, errors.As(err, &se), "%v", err)
	assert.Equal(t, &LoadError{Doc: "seed", Path: `blobs[1].name`, Msg: `blob "c/b" already seeded by blobs[0]`}, se)
	assert.Equal(t, `seed: blobs[1].name: blob "c/b" already seeded by blobs[0]`, err.Error())
	_, ok := s.Index("ok")
	assert.False(t, ok, "nothing stored")
	assert.Empty(t, s.Files())

	require.NoError(t, s.Seed(nil))
	p := NewProxy(mustURL(t, "http://upstream.test"), nil)
	t.Cleanup(func() { _ = p.Close() })
	assert.ErrorIs(t, p.Seed(&Seed{}), ErrSeedProxy)
}

// TestLoadSeedErrors: every bad seed names where it is wrong.
func TestLoadSeedErrors(t *testing.T) {
	tests := []struct {
		name, json string
		want       LoadError
		msg        string
	}{
		{"syntax", "{\n  \"blobs\": [,]\n}", LoadError{Doc: "seed", Line: 2, Column: 13, Msg: "invalid JSON: invalid character ',' looking for beginning of value"},
			"seed: line 2, column 13: invalid JSON: invalid character ',' looking for beginning of value"},
		{"truncated", `{"blobs": [`, LoadError{Doc: "seed", Line: 1, Column: 12, Msg: "invalid JSON: unexpected end of JSON input"}, ""},
		{"trailing data", `{} {}`, LoadError{Doc: "seed", Line: 1, Column: 4, Msg: "invalid JSON: invalid character '{' after top-level value"}, ""},
		{"not an object", `[]`, LoadError{Doc: "seed", Line: 1, Column: 1, Msg: `a seed is a JSON object: {"indexes": [...], "files": [...], "blobs": [...]}`}, ""},
		{"unknown key", "{\n \"blob\": []}", LoadError{Doc: "seed", Path: `"blob"`, Line: 2, Column: 7, Msg: `unknown top-level key (want "blobs", "files", "indexes" or "comment")`},
			`seed: "blob" (line 2, column 7): unknown top-level key (want "blobs", "files", "indexes" or "comment")`},
		{"duplicate key", `{"files": [], "files": []}`, LoadError{Doc: "seed", Path: `files`, Line: 1, Column: 21, Msg: "duplicate key"}, ""},
		{"section not an array", `{"blobs": {}}`, LoadError{Doc: "seed", Path: `blobs`, Line: 1, Column: 8, Msg: "want an array"}, ""},
		{"comment not a string", `{"comment": 1}`, LoadError{Doc: "seed", Path: `comment`, Line: 1, Column: 10, Msg: "want a string"}, ""},
		{"entry not an object", `{"files": [1]}`, LoadError{Doc: "seed", Path: `files[0]`, Line: 1, Column: 12, Msg: "want a JSON object"}, "seed: files[0] (line 1, column 12): want a JSON object"},
		{"unknown field", "{\"blobs\": [\n  {\"container\": \"c\", \"name\": \"b\", \"content\": \"\"},\n  {\"container\": \"c\", \"nmae\": \"b\", \"content\": \"\"}]}",
			LoadError{Doc: "seed", Path: `blobs[1].nmae`, Line: 3, Column: 3, Msg: "unknown field"}, "seed: blobs[1].nmae (line 3, column 3): unknown field"},
		{"container missing", `{"blobs": [{"name": "b", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].container`, Line: 1, Column: 12, Msg: "required"}, ""},
		{"container not a string", `{"blobs": [{"container": 7, "name": "b", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].container`, Line: 1, Column: 26, Msg: "want a string"}, ""},
		{"container with slash", `{"blobs": [{"container": "a/b", "name": "b", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].container`, Line: 1, Column: 12, Msg: `container "a/b" holds "/" or a control character`}, ""},
		{"container taken", `{"blobs": [{"container": "files", "name": "b", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].container`, Line: 1, Column: 12, Msg: `container "files" is taken by the fake's own routes: no request could reach it`}, ""},
		{"container admin", `{"blobs": [{"container": "_fakeserver", "name": "b", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].container`, Line: 1, Column: 12, Msg: `container "_fakeserver" is taken by the fake's own routes: no request could reach it`}, ""},
		{"blob name empty", `{"blobs": [{"container": "c", "name": "", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].name`, Line: 1, Column: 12, Msg: "required"}, ""},
		{"blob name control", `{"blobs": [{"container": "c", "name": "a\nb", "content": ""}]}`, LoadError{Doc: "seed", Path: `blobs[0].name`, Line: 1, Column: 12, Msg: "holds a control character"}, ""},
		{"duplicate blob", "{\"blobs\": [\n{\"container\": \"c\", \"name\": \"b\", \"content\": \"\"},\n{\"container\": \"c\", \"name\": \"b\", \"json\": 1}]}",
			LoadError{Doc: "seed", Path: `blobs[1].name`, Line: 3, Column: 1, Msg: `blob "c/b" already seeded by blobs[0]`}, ""},
		{"no content", `{"blobs": [{"container": "c", "name": "b"}]}`, LoadError{Doc: "seed", Path: `blobs[0]`, Line: 1, Column: 12, Msg: `no content: give one of content, content_base64 or json ("content": "" for an empty one)`}, ""},
		{"two contents", `{"files": [{"content": "x", "json": 1}]}`, LoadError{Doc: "seed", Path: `files[0].json`, Line: 1, Column: 12, Msg: "excludes content: give one of content, content_base64 or json"},
			"seed: files[0].json (line 1, column 12): excludes content: give one of content, content_base64 or json"},
		{"bad base64", `{"files": [{"content_base64": "A!=="}]}`, LoadError{Doc: "seed", Path: `files[0].content_base64`, Line: 1, Column: 12, Msg: "not standard base64 (RFC 4648, with padding)"}, ""},
		{"content not a string", `{"files": [{"content": [1]}]}`, LoadError{Doc: "seed", Path: `files[0].content`, Line: 1, Column: 24, Msg: "want a string"}, ""},
		{"file name with newline", `{"files": [{"name": "a\r\nX-Evil: 1", "content": ""}]}`, LoadError{Doc: "seed", Path: `files[0].name`, Line: 1, Column: 12, Msg: "longer than 1024 bytes or holds NUL, CR or LF"}, ""},
		{"content type control", `{"blobs": [{"container": "c", "name": "b", "content": "", "content_type": "a\nb"}]}`, LoadError{Doc: "seed", Path: `blobs[0].content_type`, Line: 1, Column: 12, Msg: "longer than 256 bytes or holds a control character"}, ""},
		{"index name missing", `{"indexes": [{"definition": {}}]}`, LoadError{Doc: "seed", Path: `indexes[0].name`, Line: 1, Column: 14, Msg: "required"}, ""},
		{"index name quote", `{"indexes": [{"name": "a'b", "definition": {}}]}`, LoadError{Doc: "seed", Path: `indexes[0].name`, Line: 1, Column: 14, Msg: `index name "a'b" holds "/", "'" or a control character`}, ""},
		{"definition missing", `{"indexes": [{"name": "a"}]}`, LoadError{Doc: "seed", Path: `indexes[0].definition`, Line: 1, Column: 14, Msg: "required"}, ""},
		{"definition not an object", `{"indexes": [{"name": "a", "definition": [1]}]}`, LoadError{Doc: "seed", Path: `indexes[0].definition`, Line: 1, Column: 14, Msg: "want a JSON object"}, ""},
		{"definition name differs", `{"indexes": [{"name": "a", "definition": {"name": "b"}}]}`, LoadError{Doc: "seed", Path: `indexes[0].definition`, Line: 1, Column: 14, Msg: `its "name" differs from the index name "a"`},
			`seed: indexes[0].definition (line 1, column 14): its "name" differs from the index name "a"`},
		{"duplicate index", `{"indexes": [{"name": "a", "definition": {}}, {"name": "a", "definition": {}}]}`, LoadError{Doc: "seed", Path: `indexes[1].name`, Line: 1, Column: 47, Msg: `index "a" already seeded by indexes[0]`}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seed, err := LoadSeed(strings.NewReader(tc.json))
			assert.Nil(t, seed)
			var se *LoadError
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, tc.want, *se)
			if tc.msg != "" {
				assert.Equal(t, tc.msg, err.Error())
			}
		})
	}
}

func TestLoadSeedFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "seed.json")
	require.NoError(t, os.WriteFile(good, []byte(docSeed), 0o600))
	seed, err := LoadSeedFile(good)
	require.NoError(t, err)
	assert.Len(t, seed.Blobs, 2)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"blobs": [{"container": "c"}]}`), 0o600))
	_, err = LoadSeedFile(bad)
	var se *LoadError
	require.True(t, errors.As(err, &se), "%v", err)
	assert.Equal(t, bad+`: seed: blobs[0].name (line 1, column 12): required`, err.Error())

	_, err = LoadSeedFile(filepath.Join(dir, "missing.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	defer func(n int) { maxSeedSize = n }(maxSeedSize)
	maxSeedSize = 20
	_, err = LoadSeed(strings.NewReader(`{"comment": "123456"}`)) // 21 bytes
	require.True(t, errors.As(err, &se), "%v", err)
	assert.Equal(t, "seed: larger than 20 bytes", err.Error())
	seed, err = LoadSeed(strings.NewReader(`{"comment": "12345"}`))
	require.NoError(t, err, "20 bytes")
	assert.Equal(t, &Seed{}, seed)
}

// FuzzLoadSeed: whatever the input, LoadSeed returns a seed or a
// *LoadError, never panics; a seed it returns is accepted whole by a
// Server, which then serves every blob and index in it.
func FuzzLoadSeed(f *testing.F) {
	f.Add(docSeed)
	f.Add(`{}`)
	f.Add(`{"files": [{"content": ""}], "blobs": [], "indexes": []}`)
	f.Add(`{"blobs": [{"container": "devstoreaccount1", "name": "a/../b", "json": null}]}`)
	f.Add(`{"blobs": [{"container": "c", "name": "b?x#y %2F", "content_base64": "////"}]}`)
	f.Add(`{"indexes": [{"name": "a", "definition": {"name": "a", "x": 1e999}}]}`)
	f.Add(`{"indexes": [{"name": "a", "definition": {"name": "a", "name": "b"}}]}`)
	f.Add(`{"files": [1, null, {}]}`)
	f.Add(`{"blobs": [,]}`)
	f.Add("\xff")
	f.Fuzz(func(t *testing.T, input string) {
		seed, err := LoadSeed(strings.NewReader(input))
		if err != nil {
			var se *LoadError
			require.ErrorAs(t, err, &se)
			require.Nil(t, seed, "a seed and an error")
			_ = err.Error()
			return
		}
		s := New()
		defer s.Close()
		require.NoError(t, s.Seed(seed), "a loaded seed is refused")
		rt := s.Transport()
		get := func(path string) (int, []byte) {
			req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "fake.test", Path: path}, Header: http.Header{}}
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err, "GET %q", path)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		last := map[string][]byte{}
		for _, b := range seed.Blobs {
			last[b.Container+"/"+b.Name] = b.Content
		}
		for key, want := range last {
			status, body := get("/devstoreaccount1/" + key)
			require.Equal(t, 200, status, "blob %q", key)
			require.Equal(t, string(want), string(body), "blob %q", key)
		}
		for _, ix := range seed.Indexes {
			status, _ := get("/indexes/" + ix.Name)
			require.Equal(t, 200, status, "index %q", ix.Name)
		}
		require.Len(t, s.Files(), len(seed.Files))
	})
}
