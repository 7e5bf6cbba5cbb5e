package fakeserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openaiDo sends one request to s in-process and returns the status, the
// headers and the body.
func openaiDo(t *testing.T, s *Server, method, target, contentType string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "https://res.openai.azure.com"+target, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.Transport().RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// multipartUpload builds an upload body the way openai-go does.
func multipartUpload(t *testing.T, fields map[string]string, filename string, content []byte) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		require.NoError(t, w.WriteField(k, v))
	}
	if filename != "" || content != nil {
		fw, err := w.CreateFormFile("file", filename)
		require.NoError(t, err)
		_, _ = fw.Write(content)
	}
	require.NoError(t, w.Close())
	return w.FormDataContentType(), buf.Bytes()
}

func upload(t *testing.T, s *Server, prefix, name, content string) map[string]any {
	t.Helper()
	ct, body := multipartUpload(t, map[string]string{"purpose": "assistants"}, name, []byte(content))
	status, h, b := openaiDo(t, s, http.MethodPost, prefix+"/files", ct, body)
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.Equal(t, h.Get("x-ms-request-id"), h.Get("x-request-id"))
	var f map[string]any
	require.NoError(t, json.Unmarshal(b, &f))
	return f
}

// TestOpenAIUploadAndGet: an upload answers the file object, and every
// prefix reaches the same state.
func TestOpenAIUploadAndGet(t *testing.T) {
	s := New(fixedClock())
	defer s.Close()
	f := upload(t, s, "/v1", "a.txt", "hello")
	require.Equal(t, map[string]any{"id": "file-000001", "object": "file", "bytes": 5.0,
		"created_at": float64(t0.Unix()), "filename": "a.txt", "purpose": "assistants", "status": "processed"}, f)
	for _, p := range []string{"/v1", "/openai", "/openai/v1", "/devstoreaccount1/openai"} {
		status, _, b := openaiDo(t, s, http.MethodGet, p+"/files/file-000001?api-version=2024-10-21", "", nil)
		require.Equal(t, http.StatusOK, status, p)
		require.JSONEq(t, `{"id":"file-000001","object":"file","bytes":5,"created_at":`+fmt.Sprint(t0.Unix())+
			`,"filename":"a.txt","purpose":"assistants","status":"processed"}`, string(b), p)
	}
	got := s.OpenAIFiles()
	require.Len(t, got, 1)
	require.Equal(t, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", got[0].Digest)
	require.Equal(t, []string{RouteOpenAIFileUpload, RouteOpenAIFileGet, RouteOpenAIFileGet, RouteOpenAIFileGet, RouteOpenAIFileGet},
		routesOf(s.Requests()))

	status, _, _ := openaiDo(t, s, http.MethodHead, "/v1/files/file-000001", "", nil)
	require.Equal(t, http.StatusOK, status)
	status, _, b := openaiDo(t, s, http.MethodDelete, "/v1/files/file-000001", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"id":"file-000001","object":"file","deleted":true}`, string(b))
	status, _, b = openaiDo(t, s, http.MethodGet, "/v1/files/file-000001", "", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.JSONEq(t, `{"error":{"message":"No such File object: file-000001","type":"invalid_request_error","param":"file_id","code":null}}`, string(b))
}

// TestOpenAIUploadRefusals: a body openai-go would never send is a 400
// with OpenAI's error body, and nothing is stored.
func TestOpenAIUploadRefusals(t *testing.T) {
	s := New()
	defer s.Close()
	ctOK, _ := multipartUpload(t, nil, "a", nil)
	for _, tc := range []struct {
		name, ct string
		body     []byte
		param    string
	}{
		{"not multipart", "application/json", []byte(`{}`), ""},
		{"no boundary", "multipart/form-data", nil, ""},
		{"no parts", ctOK, []byte("garbage"), "purpose"},
		{"no purpose", "", nil, "purpose"},
		{"bad purpose", "", nil, "purpose"},
		{"no file", "", nil, "file"},
		{"no file name", "", nil, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := tc.ct, tc.body
			switch tc.name {
			case "no purpose":
				ct, body = multipartUpload(t, nil, "a.txt", []byte("x"))
			case "bad purpose":
				ct, body = multipartUpload(t, map[string]string{"purpose": "nope"}, "a.txt", []byte("x"))
			case "no file":
				ct, body = multipartUpload(t, map[string]string{"purpose": "batch"}, "", nil)
			case "no file name":
				ct, body = multipartUpload(t, map[string]string{"purpose": "batch"}, "", []byte("x"))
			}
			status, _, b := openaiDo(t, s, http.MethodPost, "/v1/files", ct, body)
			require.Equal(t, http.StatusBadRequest, status, "%s", b)
			var e struct {
				Error struct {
					Type  string  `json:"type"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(b, &e))
			require.Equal(t, "invalid_request_error", e.Error.Type)
			if tc.param == "" {
				require.Nil(t, e.Error.Param)
			} else {
				require.Equal(t, tc.param, *e.Error.Param)
			}
		})
	}
	require.Empty(t, s.OpenAIFiles())
}

// TestOpenAIListPaging: cursor paging by after and limit, newest first by
// default, with first_id, last_id and has_more as openai-go reads them.
func TestOpenAIListPaging(t *testing.T) {
	s := New()
	defer s.Close()
	for i := range 5 {
		s.AddOpenAIFile(fmt.Sprintf("f%d", i), "assistants", []byte{byte(i)})
	}
	s.AddOpenAIFile("other", "batch", []byte("b"))
	type page struct {
		Object  string           `json:"object"`
		Data    []map[string]any `json:"data"`
		FirstID *string          `json:"first_id"`
		LastID  *string          `json:"last_id"`
		HasMore bool             `json:"has_more"`
	}
	list := func(q string) (page, int) {
		status, _, b := openaiDo(t, s, http.MethodGet, "/v1/files?"+q, "", nil)
		var p page
		if status == http.StatusOK {
			require.NoError(t, json.Unmarshal(b, &p), "%s", b)
		}
		return p, status
	}
	ids := func(p page) []string {
		var out []string
		for _, d := range p.Data {
			out = append(out, d["id"].(string))
		}
		return out
	}
	p, _ := list("purpose=assistants&limit=2&order=asc")
	require.Equal(t, []string{"file-000001", "file-000002"}, ids(p))
	require.True(t, p.HasMore)
	require.Equal(t, "file-000001", *p.FirstID)
	require.Equal(t, "file-000002", *p.LastID)
	p, _ = list("purpose=assistants&limit=2&order=asc&after=file-000004")
	require.Equal(t, []string{"file-000005"}, ids(p))
	require.False(t, p.HasMore)
	p, _ = list("limit=4")
	require.Equal(t, []string{"file-000006", "file-000005", "file-000004", "file-000003"}, ids(p))
	require.True(t, p.HasMore)
	p, _ = list("after=file-000002")
	require.Equal(t, []string{"file-000001"}, ids(p))
	require.False(t, p.HasMore)
	p, _ = list("purpose=vision")
	require.Equal(t, "list", p.Object)
	require.NotNil(t, p.Data)
	require.Empty(t, p.Data)
	require.Nil(t, p.FirstID)
	require.False(t, p.HasMore)
	for _, q := range []string{"limit=0", "limit=10001", "limit=x", "order=up", "after=file-999999", "a=%zz"} {
		_, status := list(q)
		require.Equal(t, http.StatusBadRequest, status, q)
	}
}

// TestOpenAIBatchPolling: a batch is in_progress (with
// openai-poll-after-ms) for the configured number of GETs, then completed.
func TestOpenAIBatchPolling(t *testing.T) {
	s := New(fixedClock())
	defer s.Close()
	a := s.AddOpenAIFile("a", "assistants", []byte("a"))
	b := s.AddOpenAIFile("b", "assistants", []byte("b"))
	s.SetOpenAIBatchPolls(2)
	status, _, body := openaiDo(t, s, http.MethodPost, "/openai/vector_stores/vs_1/file_batches?api-version=2024-10-21",
		"application/json", []byte(`{"file_ids":["`+a.ID+`"],"files":[{"file_id":"`+b.ID+`"}]}`))
	require.Equal(t, http.StatusOK, status, "%s", body)
	want := func(st string, inProgress, completed int) string {
		return fmt.Sprintf(`{"id":"vsfb_000001","object":"vector_store.files_batch","created_at":%d,"vector_store_id":"vs_1",`+
			`"status":%q,"file_counts":{"in_progress":%d,"completed":%d,"failed":0,"cancelled":0,"total":2}}`,
			t0.Unix(), st, inProgress, completed)
	}
	require.JSONEq(t, want("in_progress", 2, 0), string(body))
	for i, st := range []string{"in_progress", "in_progress", "completed", "completed"} {
		status, h, body := openaiDo(t, s, http.MethodGet, "/v1/vector_stores/vs_1/file_batches/vsfb_000001", "", nil)
		require.Equal(t, http.StatusOK, status)
		if st == "completed" {
			require.JSONEq(t, want(st, 0, 2), string(body), "poll %d", i+1)
			require.Empty(t, h.Get("openai-poll-after-ms"))
		} else {
			require.JSONEq(t, want(st, 2, 0), string(body), "poll %d", i+1)
			require.Equal(t, "1000", h.Get("openai-poll-after-ms"))
		}
	}
	batches := s.OpenAIBatches()
	require.Len(t, batches, 1)
	require.Equal(t, OpenAIBatch{ID: "vsfb_000001", VectorStoreID: "vs_1", FileIDs: []string{a.ID, b.ID},
		CreatedAt: t0.Unix(), Polls: 4, Completed: true}, batches[0])

	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodPost, "/v1/vector_stores/vs_1/file_batches", `{"file_ids":[]}`, 400},
		{http.MethodPost, "/v1/vector_stores/vs_1/file_batches", `[`, 400},
		{http.MethodPost, "/v1/vector_stores/vs_1/file_batches", `{"file_ids":["file-404"]}`, 404},
		{http.MethodGet, "/v1/vector_stores/vs_2/file_batches/vsfb_000001", "", 404},
		{http.MethodGet, "/v1/vector_stores/vs_1/file_batches/vsfb_000009", "", 404},
		{http.MethodPut, "/v1/files", "", 405},
		{http.MethodPatch, "/v1/vector_stores/vs_1/file_batches/vsfb_000001", "", 405},
	} {
		status, h, body := openaiDo(t, s, tc.method, tc.path, "application/json", []byte(tc.body))
		require.Equal(t, tc.status, status, "%s %s: %s", tc.method, tc.path, body)
		require.Contains(t, h.Get("Content-Type"), "application/json")
		require.Contains(t, string(body), `"type":"invalid_request_error"`)
	}
	require.Len(t, s.OpenAIBatches(), 1)
}

// TestOpenAIThrottleHeaders: a WithRetryAfterMs throttle answers 429
// with retry-after-ms beside Retry-After and the named limit at 0; a
// plain answer reports the per-minute request budget; a WithRetryAfterMs
// throttle on a path outside the surface (an inference call) carries the
// same headers.
func TestOpenAIThrottleHeaders(t *testing.T) {
	s := New(fixedClock())
	defer s.Close()
	s.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(3)), Nth(1)) // rule 0: not an OpenAI throttle
	s.Script().Add(RouteOpenAIFileList, Throttle(RetryAfterSeconds(8)).WithRetryAfterMs(20000, false), Nth(2))
	s.Script().Add(RouteOther, Throttle(RetryAfterSeconds(2)).WithRetryAfterMs(1500, true),
		Method("POST"), MatchPath("/openai/deployments/"))

	status, h, _ := openaiDo(t, s, http.MethodGet, "/v1/files", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "1000", h.Get("x-ratelimit-limit-requests"))
	require.Equal(t, "999", h.Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "240000", h.Get("x-ratelimit-remaining-tokens"))
	require.Empty(t, h.Values("retry-after-ms"))

	status, h, b := openaiDo(t, s, http.MethodGet, "/v1/files", "", nil)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, []string{"20000"}, h.Values("retry-after-ms"))
	require.Equal(t, []string{"8"}, h.Values("Retry-After"))
	require.Equal(t, "0", h.Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "240000", h.Get("x-ratelimit-remaining-tokens"))
	require.Equal(t, h.Get("x-ms-request-id"), h.Get("x-request-id"))
	require.Contains(t, string(b), `"error"`)

	status, h, _ = openaiDo(t, s, http.MethodPost, "/openai/deployments/gpt/chat/completions?api-version=2024-10-21", "application/json", []byte(`{}`))
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, []string{"1500"}, h.Values("retry-after-ms"))
	require.Equal(t, []string{"2"}, h.Values("Retry-After"))
	require.Equal(t, "0", h.Get("x-ratelimit-remaining-tokens"))
	require.Equal(t, "997", h.Get("x-ratelimit-remaining-requests"))

	// The File service keeps its answers: no OpenAI headers, and rule 0's
	// 429 has no retry-after-ms.
	req, _ := http.NewRequest(http.MethodGet, "http://fake.test/files", nil)
	resp, err := s.Transport().RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Empty(t, resp.Header.Values("retry-after-ms"))
	require.Empty(t, resp.Header.Values("x-ratelimit-remaining-requests"))

	rs := s.Requests()
	require.Equal(t, []int{-1, 1, 2, 0}, []int{rs[0].Rule, rs[1].Rule, rs[2].Rule, rs[3].Rule})
	require.Equal(t, "429 retry-after=seconds(8)", rs[1].Fault)
	require.Panics(t, func() { s.Script().Add(RouteOpenAIFileList, Throttle(RetryAfterMissing()).WithRetryAfterMs(-1, false)) })
	require.Panics(t, func() { s.Script().Add("openai.nope", Throttle(RetryAfterMissing()).WithRetryAfterMs(0, false)) })
	require.Panics(t, func() {
		s.Script().Add(RouteOpenAIFileUpload, Throttle(RetryAfterMissing()).WithRetryAfterMs(0, false), Method("GET"))
	})
}

// TestOpenAIRequestBudgetResetsEachMinute: x-ratelimit-remaining-requests
// counts the OpenAI requests of the current server-clock minute.
func TestOpenAIRequestBudgetResetsEachMinute(t *testing.T) {
	now := t0
	s := New(WithClock(func() time.Time { return now }))
	defer s.Close()
	var got []string
	for _, d := range []time.Duration{0, 1 * time.Second, 60 * time.Second} {
		now = t0.Truncate(time.Minute).Add(d)
		_, h, _ := openaiDo(t, s, http.MethodGet, "/v1/files", "", nil)
		got = append(got, h.Get("x-ratelimit-remaining-requests"))
	}
	require.Equal(t, []string{"999", "998", "999"}, got)
}

// TestOpenAIKeepsTodaysRoutes: the File service at /files, blobs in
// containers named like a prefix, and other paths under a prefix keep
// their old routes.
func TestOpenAIKeepsTodaysRoutes(t *testing.T) {
	for _, tc := range []struct{ method, path, route string }{
		{"POST", "/files", RouteFileUpload},
		{"GET", "/files", RouteFileList},
		{"GET", "/devstoreaccount1/files", RouteFileList},
		{"GET", "/v1/other.json", RouteBlobGet},
		{"PUT", "/openai/a/b", RouteBlobPut},
		{"GET", "/v1/files/a/b", RouteBlobGet},
		{"GET", "/v1files", RouteOther},
		{"GET", "/v1/files", RouteOpenAIFileList},
		{"GET", "/v1/files/", RouteBlobGet},
		{"PUT", "/v1/files", RouteOther},
		{"GET", "/openai/vector_stores//file_batches", RouteBlobGet},
	} {
		require.Equal(t, tc.route, classify(tc.method, servicePath(DefaultAccount, tc.path), ""), "%s %s", tc.method, tc.path)
	}
}

// TestOpenAIRoutesInJSONScripts: a JSON script may name the OpenAI routes.
func TestOpenAIRoutesInJSONScripts(t *testing.T) {
	sc, err := LoadScript(strings.NewReader(`{"rules":[{"route":"openai.file.upload","fault":"status","status":503}]}`))
	require.NoError(t, err)
	s := New(WithScript(sc))
	defer s.Close()
	ct, body := multipartUpload(t, map[string]string{"purpose": "batch"}, "a", []byte("x"))
	status, _, _ := openaiDo(t, s, http.MethodPost, "/v1/files", ct, body)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Empty(t, s.OpenAIFiles())
}

// FuzzOpenAIUpload: whatever the content type and body, an upload is
// answered 200 (and stored) or 400, never a panic.
func FuzzOpenAIUpload(f *testing.F) {
	f.Add("multipart/form-data; boundary=x", []byte("--x\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nhi\r\n--x--\r\n"))
	f.Add("multipart/form-data; boundary=x", []byte("--x\r\n\r\n"))
	f.Add("multipart/form-data", []byte(""))
	f.Add("text/plain", []byte("x"))
	f.Add("multipart/form-data; boundary=\"", []byte("--"))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		s := New()
		defer s.Close()
		req := &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: "https", Host: "h", Path: "/v1/files"},
			Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body))}
		resp, err := s.Transport().RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n := len(s.OpenAIFiles())
		switch resp.StatusCode {
		case http.StatusOK:
			require.Equal(t, 1, n)
		case http.StatusBadRequest:
			require.Equal(t, 0, n)
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}
