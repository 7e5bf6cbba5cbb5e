package blobjournal

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// scripted is an azcore transporter that answers each request with the
// next scripted reply and keeps what it saw.
type scripted struct {
	mu      sync.Mutex
	replies []func(*http.Request) (*http.Response, error)
	seen    []*http.Request
}

func (s *scripted) Do(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, req)
	if len(s.replies) == 0 {
		return nil, errors.New("scripted: no reply left")
	}
	f := s.replies[0]
	s.replies = s.replies[1:]
	return f(req)
}

func reply(status int, h map[string]string, body string) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		hd := http.Header{}
		for k, v := range h {
			hd.Set(k, v)
		}
		return &http.Response{StatusCode: status, Header: hd, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
}

const sasURL = "https://acct.blob.core.windows.net/runs?sv=2024&sig=SECRETSIG"

func newTestStore(t *testing.T, s *scripted) *Store {
	t.Helper()
	o := ClientOptions()
	o.Transport = s
	c, err := container.NewClientWithNoCredential(sasURL, o)
	if err != nil {
		t.Fatal(err)
	}
	return New(c, "batch-1/")
}

// Create is one conditional PUT: If-None-Match: *, the content's MD5, the
// blob under the prefix; it returns the ETag.
func TestCreateConditional(t *testing.T) {
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		reply(201, map[string]string{"ETag": `"0x8D1"`, "x-ms-request-id": "rid-1"}, ""),
	}}
	st := newTestStore(t, s)
	v, err := st.Create(context.Background(), "backoff-0001.json", []byte("{}\n"))
	if err != nil || v != `"0x8D1"` {
		t.Fatalf("Create = %q, %v", v, err)
	}
	if len(s.seen) != 1 {
		t.Fatalf("%d requests, want 1", len(s.seen))
	}
	req := s.seen[0]
	sum := md5.Sum([]byte("{}\n"))
	if req.Method != "PUT" || req.URL.Path != "/runs/batch-1/backoff-0001.json" ||
		req.Header.Get("If-None-Match") != "*" || rawHeader(req.Header, "Content-MD5") != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("request %s %s, headers %v", req.Method, req.URL.Path, req.Header)
	}
	body, _ := io.ReadAll(req.Body)
	if !bytes.Equal(body, []byte("{}\n")) {
		t.Fatalf("body %q", body)
	}
}

// Each failure of a create: which ones say "exists", the request ID kept,
// one request only (no retry: not of a 429, not of a 500), nothing of the
// URL's query in the message.
func TestCreateFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     func(*http.Request) (*http.Response, error)
		exists    bool
		status    int
		requestID string
	}{
		{"412", reply(412, map[string]string{"x-ms-error-code": "ConditionNotMet", "x-ms-request-id": "r412"}, ""), true, 412, "r412"},
		{"409 exists", reply(409, map[string]string{"x-ms-error-code": "BlobAlreadyExists", "x-ms-request-id": "r409"}, ""), true, 409, "r409"},
		{"409 lease", reply(409, map[string]string{"x-ms-error-code": "LeaseIdMissing", "x-ms-request-id": "r409b"}, ""), false, 409, "r409b"},
		{"429", reply(429, map[string]string{"Retry-After": "1", "x-ms-request-id": "r429"}, ""), false, 429, "r429"},
		{"500", reply(500, map[string]string{"x-ms-request-id": "r500"}, ""), false, 500, "r500"},
		{"reset", func(*http.Request) (*http.Response, error) {
			// What net/http returns: a *url.Error naming the URL.
			return nil, &url.Error{Op: "Put", URL: sasURL, Err: errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")}
		}, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{replies: []func(*http.Request) (*http.Response, error){tc.reply, tc.reply, tc.reply}}
			_, err := newTestStore(t, s).Create(context.Background(), "pending-request.json", []byte("x\n"))
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if errors.Is(err, fs.ErrExist) != tc.exists || be.StatusCode != tc.status || be.RequestID != tc.requestID || be.Op != "create" || be.Name != "pending-request.json" {
				t.Fatalf("err = %+v (exists %v)", be, errors.Is(err, fs.ErrExist))
			}
			if len(s.seen) != 1 {
				t.Fatalf("%d requests, want 1 (no retry)", len(s.seen))
			}
			if msg := err.Error(); strings.Contains(msg, "SECRETSIG") || strings.Contains(msg, "sv=") || (tc.requestID != "" && !strings.Contains(msg, tc.requestID)) {
				t.Fatalf("message %q", msg)
			}
			if tc.status == 0 && be.Transport != "read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer" {
				t.Fatalf("Transport = %q, want the cause of the *url.Error whole, without its URL", be.Transport)
			}
		})
	}
}

// Remove is a DELETE with If-Match on the version; without a version it
// sends nothing.
func TestRemoveConditional(t *testing.T) {
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		reply(202, nil, ""),
		reply(412, map[string]string{"x-ms-error-code": "ConditionNotMet", "x-ms-request-id": "rr"}, ""),
	}}
	st := newTestStore(t, s)
	if err := st.Remove(context.Background(), "pending-request.json", ""); err == nil || len(s.seen) != 0 {
		t.Fatalf("Remove without version = %v after %d requests", err, len(s.seen))
	}
	if err := st.Remove(context.Background(), "pending-request.json", `"0x1"`); err != nil {
		t.Fatal(err)
	}
	if r := s.seen[0]; r.Method != "DELETE" || r.Header.Get("If-Match") != `"0x1"` || r.URL.Path != "/runs/batch-1/pending-request.json" {
		t.Fatalf("%s %s %v", r.Method, r.URL.Path, r.Header)
	}
	err := st.Remove(context.Background(), "pending-request.json", `"0x1"`)
	var be *Error
	if !errors.As(err, &be) || be.StatusCode != 412 || errors.Is(err, fs.ErrExist) {
		t.Fatalf("Remove of a changed marker = %v", err)
	}
}

// Read asks for limit+1 bytes, returns the ETag; 404 is fs.ErrNotExist and
// the 416 of an empty blob is empty content.
func TestRead(t *testing.T) {
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		reply(206, map[string]string{"ETag": `"e1"`, "Content-Length": "3"}, "abc"),
		reply(404, map[string]string{"x-ms-error-code": "BlobNotFound"}, ""),
		reply(416, map[string]string{"x-ms-error-code": "InvalidRange"}, ""),
	}}
	st := newTestStore(t, s)
	data, v, err := st.Read(context.Background(), "run.json", 10)
	if err != nil || string(data) != "abc" || v != `"e1"` {
		t.Fatalf("Read = %q %q %v", data, v, err)
	}
	if got := rawHeader(s.seen[0].Header, "x-ms-range"); got != "bytes=0-10" {
		t.Fatalf("range %q, want bytes=0-10 (headers %v)", got, s.seen[0].Header)
	}
	if _, _, err := st.Read(context.Background(), "gone.json", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("404 = %v", err)
	}
	if data, _, err := st.Read(context.Background(), "empty.json", 10); err != nil || len(data) != 0 {
		t.Fatalf("416 = %q %v", data, err)
	}
}

// List strips the prefix; String names the run without the SAS.
func TestListAndString(t *testing.T) {
	body := `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Prefix>batch-1/</Prefix><Blobs>` +
		`<Blob><Name>batch-1/run.json</Name><Properties></Properties></Blob>` +
		`<Blob><Name>batch-1/plan.json</Name><Properties></Properties></Blob></Blobs><NextMarker/></EnumerationResults>`
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		reply(200, map[string]string{"Content-Type": "application/xml"}, body),
	}}
	st := newTestStore(t, s)
	names, err := st.List(context.Background(), 1003)
	if err != nil || strings.Join(names, ",") != "run.json,plan.json" {
		t.Fatalf("List = %v, %v", names, err)
	}
	if q := s.seen[0].URL.Query(); q.Get("prefix") != "batch-1/" || q.Get("comp") != "list" {
		t.Fatalf("query %v", q)
	}
	if got := st.String(); got != "https://acct.blob.core.windows.net/runs/batch-1/" {
		t.Fatalf("String = %q", got)
	}
}

// ListPrefix lists the blobs of one shard only: the query's prefix is the
// store's and the shard's; the names come back without the store's prefix.
func TestListPrefix(t *testing.T) {
	body := `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Prefix>batch-1/shard-02/</Prefix><Blobs>` +
		`<Blob><Name>batch-1/shard-02/run.json</Name><Properties></Properties></Blob>` +
		`<Blob><Name>batch-1/shard-02/backoff-0001.json</Name><Properties></Properties></Blob></Blobs><NextMarker/></EnumerationResults>`
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		reply(200, map[string]string{"Content-Type": "application/xml"}, body),
	}}
	st := newTestStore(t, s)
	names, err := st.ListPrefix(context.Background(), "shard-02/", 1003)
	if err != nil || strings.Join(names, ",") != "shard-02/run.json,shard-02/backoff-0001.json" {
		t.Fatalf("ListPrefix = %v, %v", names, err)
	}
	if q := s.seen[0].URL.Query(); q.Get("prefix") != "batch-1/shard-02/" || q.Get("comp") != "list" {
		t.Fatalf("query %v", q)
	}
}

// rawHeader returns a header the SDK set under its own spelling (not
// canonicalized), matched without regard to case.
func rawHeader(h http.Header, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return strings.Join(v, ",")
		}
	}
	return ""
}

// A transport error that is no *url.Error keeps its whole text, without
// any URL query or userinfo (the module's own copy of the root's rule).
func TestTransportErrorText(t *testing.T) {
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){
		func(*http.Request) (*http.Response, error) {
			return nil, errors.New("proxy https://u:p@proxy.example/x?sig=SECRET refused: dial: timeout")
		},
	}}
	_, err := newTestStore(t, s).Create(context.Background(), "run.json", []byte("x\n"))
	var be *Error
	if !errors.As(err, &be) || be.Transport != "proxy https://proxy.example/x refused: dial: timeout" {
		t.Fatalf("err = %v", err)
	}
	if got := safeID("rid with space"); !strings.HasPrefix(got, "sha256:") || len(got) != 23 {
		t.Fatalf("safeID = %q", got)
	}
	if got := safeID("rid-1:ok"); got != "rid-1:ok" {
		t.Fatalf("safeID = %q", got)
	}
}

// no-nesting: EnclosingRun asks, from the nearest prefix up,
// whether an enclosing prefix holds run.json.
func TestEnclosingRun(t *testing.T) {
	notFound := reply(404, map[string]string{"x-ms-error-code": "BlobNotFound"}, "")
	s := &scripted{replies: []func(*http.Request) (*http.Response, error){notFound, reply(200, nil, "")}}
	o := ClientOptions()
	o.Transport = s
	c, err := container.NewClientWithNoCredential(sasURL, o)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := New(c, "a/b/c/").EnclosingRun(context.Background())
	if err != nil || outer != "a/" {
		t.Fatalf("EnclosingRun = %q, %v; want a/", outer, err)
	}
	if len(s.seen) != 2 || s.seen[0].Method != "HEAD" || s.seen[0].URL.Path != "/runs/a/b/run.json" || s.seen[1].URL.Path != "/runs/a/run.json" {
		t.Fatalf("requests %v", s.seen)
	}
	s = &scripted{replies: []func(*http.Request) (*http.Response, error){notFound}}
	o.Transport = s
	c, _ = container.NewClientWithNoCredential(sasURL, o)
	if outer, err := New(c, "top/").EnclosingRun(context.Background()); err != nil || outer != "" || len(s.seen) != 1 || s.seen[0].URL.Path != "/runs/run.json" {
		t.Fatalf("EnclosingRun = %q, %v after %v", outer, err, s.seen)
	}
}

// A nil *Store, the zero Store and New(nil, …) fail every method with an
// *Error, never a panic.
func TestZeroStore(t *testing.T) {
	for name, st := range map[string]*Store{"nil": nil, "zero": {}, "New(nil)": New(nil, "p/")} {
		ctx := context.Background()
		var be *Error
		if _, err := st.Create(ctx, "run.json", []byte("x")); !errors.As(err, &be) {
			t.Errorf("%s: Create = %v", name, err)
		}
		if _, _, err := st.Read(ctx, "run.json", 10); !errors.As(err, &be) {
			t.Errorf("%s: Read = %v", name, err)
		}
		if _, err := st.List(ctx, 10); !errors.As(err, &be) {
			t.Errorf("%s: List = %v", name, err)
		}
		if err := st.Remove(ctx, "pending-request.json", `"1"`); !errors.As(err, &be) {
			t.Errorf("%s: Remove = %v", name, err)
		}
		if _, err := st.EnclosingRun(ctx); !errors.As(err, &be) {
			t.Errorf("%s: EnclosingRun = %v", name, err)
		}
		if st.String() == "" {
			t.Errorf("%s: String empty", name)
		}
	}
}
