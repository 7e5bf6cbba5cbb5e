package fakeserver

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Route names of the OpenAI-compatible surface: the Files API and
// vector-store file batches as openai-go parses them, under /v1 (OpenAI),
// /openai (Azure OpenAI through azure.WithEndpoint) and /openai/v1 (its v1
// API), every prefix {p} reaching the same state (each name's comment
// gives its method and path).
//
// An upload is multipart/form-data with a "purpose" (assistants, batch,
// fine-tune, vision, user_data or evals) and a named "file" part; it
// answers the file object. A list is newest first unless order=asc, with
// limit (1 to 10000, the default), after (a file ID) and purpose. A batch
// create takes "file_ids" (or "files":[{"file_id"}]) of uploaded files;
// its GETs answer "in_progress" (openai-poll-after-ms: 1000) until
// [Server.SetOpenAIBatchPolls] have, then "completed". A vector store
// exists once named. Errors are OpenAI's {"error":{"message","type",
// "param","code"}}; another method is a 405; another path under a prefix
// is a blob of container "v1" or "openai". Every answer carries
// x-request-id (the x-ms-request-id), x-ratelimit-limit-requests,
// x-ratelimit-remaining-requests (of [OpenAIRequestsPerMinute] per
// server-clock minute, counted, never enforced) and
// x-ratelimit-remaining-tokens; [Fault.WithRetryAfterMs] scripts Azure
// OpenAI's 429.
const (
	RouteOpenAIFileUpload  = "openai.file.upload"       // POST {p}/files
	RouteOpenAIFileList    = "openai.file.list"         // GET {p}/files
	RouteOpenAIFileGet     = "openai.file.get"          // GET or HEAD {p}/files/{id}
	RouteOpenAIFileDelete  = "openai.file.delete"       // DELETE {p}/files/{id}
	RouteOpenAIBatchCreate = "openai.file_batch.create" // POST {p}/vector_stores/{vs}/file_batches
	RouteOpenAIBatchGet    = "openai.file_batch.get"    // GET {p}/vector_stores/{vs}/file_batches/{id}
)

// OpenAIRequestsPerMinute is the request limit the OpenAI surface reports
// in x-ratelimit-limit-requests.
const OpenAIRequestsPerMinute = 1000

// openaiTokensRemaining is what x-ratelimit-remaining-tokens says when no
// token-limit throttle fired.
const openaiTokensRemaining = 240000

// Limits of the OpenAI surface.
const (
	openaiMaxListLimit = 10000
	openaiMaxFileIDs   = 2000
)

// openaiPrefixes are the path prefixes of the surface, longest first.
var openaiPrefixes = []string{"/openai/v1", "/openai", "/v1"}

// openaiRouteNames are the surface's routes a rule may name (script.go's
// validate accepts them besides routeNames, whose list its error message
// spells out).
var openaiRouteNames = []string{RouteOpenAIFileUpload, RouteOpenAIFileList, RouteOpenAIFileGet,
	RouteOpenAIFileDelete, RouteOpenAIBatchCreate, RouteOpenAIBatchGet}

// OpenAIFile is one file of the OpenAI-compatible Files API.
type OpenAIFile struct {
	// ID is "file-" and a number in upload order ("file-000001").
	ID string `json:"id"`
	// Filename is the file name of the upload's "file" part.
	Filename string `json:"filename"`
	// Purpose is the upload's "purpose" field.
	Purpose string `json:"purpose"`
	// Bytes is the content length.
	Bytes int64 `json:"bytes"`
	// CreatedAt is the upload time (server clock), in Unix seconds.
	CreatedAt int64 `json:"created_at"`
	// Digest is "sha256:" and the hex SHA-256 of the content (not of the
	// multipart body).
	Digest string `json:"-"`
}

// OpenAIBatch is one vector-store file batch.
type OpenAIBatch struct {
	ID            string
	VectorStoreID string
	FileIDs       []string
	CreatedAt     int64
	// Polls is how many GETs of the batch the server answered.
	Polls int
	// Completed is true once a GET answered "completed".
	Completed bool
}

// openaiState is the OpenAI surface's state; the Server's mu guards it.
type openaiState struct {
	files    []OpenAIFile
	batches  []*OpenAIBatch // in creation order
	fileSeq  int
	polls    int   // GETs answered in_progress before completed
	minute   int64 // the server-clock minute counted
	inMinute int   // OpenAI requests in it
}

func (st *openaiState) init() {
	st.polls = 1
}

// SetOpenAIBatchPolls sets how many GETs of a vector-store file batch
// answer "in_progress" before one answers "completed"; default 1. n < 0 is
// taken as 0 (the first GET completes).
func (s *Server) SetOpenAIBatchPolls(n int) {
	s.mu.Lock()
	s.openai.polls = max(n, 0)
	s.mu.Unlock()
}

// AddOpenAIFile stores content as an uploaded OpenAI file, without a
// request, and returns it. Use it to seed an inventory of several pages.
func (s *Server) AddOpenAIFile(filename, purpose string, content []byte) OpenAIFile {
	return s.addOpenAIFile(filename, purpose, content, s.now())
}

// OpenAIFiles returns the OpenAI files in upload order.
func (s *Server) OpenAIFiles() []OpenAIFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.openai.files)
}

// OpenAIBatches returns the vector-store file batches in creation order.
func (s *Server) OpenAIBatches() []OpenAIBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]OpenAIBatch, 0, len(s.openai.batches))
	for _, b := range s.openai.batches {
		c := *b
		c.FileIDs = slices.Clone(b.FileIDs)
		out = append(out, c)
	}
	return out
}

func (s *Server) addOpenAIFile(filename, purpose string, content []byte, now time.Time) OpenAIFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openai.fileSeq++
	f := OpenAIFile{
		ID:        fmt.Sprintf("file-%06d", s.openai.fileSeq),
		Filename:  filename,
		Purpose:   purpose,
		Bytes:     int64(len(content)),
		CreatedAt: now.Unix(),
		Digest:    digestOf(content),
	}
	s.openai.files = append(s.openai.files, f)
	return f
}

// openaiPath returns the segments of a service path after the surface's
// prefix, and whether the path is one of the surface's resources.
func openaiPath(p string) ([]string, bool) {
	for _, pre := range openaiPrefixes {
		r, found := strings.CutPrefix(p, pre)
		if !found || (r != "" && r[0] != '/') {
			continue
		}
		segs := strings.Split(strings.TrimPrefix(r, "/"), "/")
		n := len(segs)
		files := segs[0] == "files" && (n == 1 || n == 2 && segs[1] != "")
		batches := (n == 3 || n == 4 && segs[3] != "") && segs[0] == "vector_stores" && segs[1] != "" && segs[2] == "file_batches"
		return segs, files || batches
	}
	return nil, false
}

// classifyOpenAI names the route of a request on the surface; ok is false
// for a path that is not one of its resources. An unknown method on one
// is RouteOther (answered 405 by serveRoute).
func classifyOpenAI(method, p string) (route string, ok bool) {
	segs, ok := openaiPath(p)
	if !ok {
		return "", false
	}
	switch n := len(segs); {
	case n == 1 && method == http.MethodPost:
		return RouteOpenAIFileUpload, true
	case n == 1 && method == http.MethodGet:
		return RouteOpenAIFileList, true
	case n == 2 && (method == http.MethodGet || method == http.MethodHead):
		return RouteOpenAIFileGet, true
	case n == 2 && method == http.MethodDelete:
		return RouteOpenAIFileDelete, true
	case n == 3 && method == http.MethodPost:
		return RouteOpenAIBatchCreate, true
	case n == 4 && method == http.MethodGet:
		return RouteOpenAIBatchGet, true
	}
	return RouteOther, true
}

// openaiFileJSON is a file object as the Files API answers it.
type openaiFileJSON struct {
	OpenAIFile
	Object string `json:"object"` // "file"
	Status string `json:"status"` // "processed"
}

func fileJSON(f OpenAIFile) openaiFileJSON { return openaiFileJSON{f, "file", "processed"} }

var openaiPurposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

// maxMultipartParts bounds the parts an upload may have.
const maxMultipartParts = 16

func (s *Server) openaiUpload(r *http.Request, body []byte, now time.Time) *response {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return openaiError(http.StatusBadRequest, "", "The request must be multipart/form-data with a boundary.")
	}
	var (
		purpose, filename string
		content           []byte
		haveFile          bool
	)
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || n >= maxMultipartParts {
			return openaiError(http.StatusBadRequest, "", "The multipart body is malformed.")
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return openaiError(http.StatusBadRequest, "", "The multipart body is malformed.")
		}
		switch part.FormName() {
		case "purpose":
			purpose = string(data)
		case "file":
			filename, content, haveFile = part.FileName(), data, true
		}
	}
	switch {
	case purpose == "":
		return openaiError(http.StatusBadRequest, "purpose", "Missing required parameter: 'purpose'.")
	case !slices.Contains(openaiPurposes, purpose):
		return openaiError(http.StatusBadRequest, "purpose",
			fmt.Sprintf("Invalid value for 'purpose': %q is not one of %s.", clip(purpose, 32), strings.Join(openaiPurposes, ", ")))
	case !haveFile:
		return openaiError(http.StatusBadRequest, "file", "Missing required parameter: 'file'.")
	case filename == "" || len(filename) > maxFileNameLen || strings.ContainsAny(filename, "\x00\r\n"):
		return openaiError(http.StatusBadRequest, "file", "The file part needs a file name without control characters.")
	}
	f := s.addOpenAIFile(filename, purpose, content, now)
	return jsonResponse(http.StatusOK, fileJSON(f))
}

// openaiListPage is the JSON of GET {p}/files.
type openaiListPage struct {
	Object  string           `json:"object"`
	Data    []openaiFileJSON `json:"data"`
	FirstID *string          `json:"first_id"`
	LastID  *string          `json:"last_id"`
	HasMore bool             `json:"has_more"`
}

func (s *Server) openaiList(r *http.Request) *response {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return openaiError(http.StatusBadRequest, "", "The query string is malformed.")
	}
	limit, err := strconv.Atoi(cmp.Or(q.Get("limit"), strconv.Itoa(openaiMaxListLimit)))
	if err != nil || limit < 1 || limit > openaiMaxListLimit {
		return openaiError(http.StatusBadRequest, "limit", "limit must be an integer from 1 to 10000.")
	}
	order := cmp.Or(q.Get("order"), "desc")
	if order != "asc" && order != "desc" {
		return openaiError(http.StatusBadRequest, "order", "order must be asc or desc.")
	}
	purpose := q.Get("purpose")

	s.mu.Lock()
	files := slices.DeleteFunc(slices.Clone(s.openai.files), func(f OpenAIFile) bool { return purpose != "" && f.Purpose != purpose })
	s.mu.Unlock()
	if order == "desc" {
		slices.Reverse(files)
	}
	start := 0
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(files, func(f OpenAIFile) bool { return f.ID == after })
		if i < 0 {
			return openaiError(http.StatusBadRequest, "after", "The after cursor names no file.")
		}
		start = i + 1
	}
	end := min(start+limit, len(files))
	page := openaiListPage{Object: "list", Data: make([]openaiFileJSON, 0, end-start), HasMore: end < len(files)}
	for _, f := range files[start:end] {
		page.Data = append(page.Data, fileJSON(f))
	}
	if len(page.Data) > 0 {
		page.FirstID, page.LastID = new(page.Data[0].ID), new(page.Data[len(page.Data)-1].ID)
	}
	return jsonResponse(http.StatusOK, page)
}

// openaiFile is the index of file id, -1 when there is none; the caller
// holds mu.
func (s *Server) openaiFile(id string) int {
	return slices.IndexFunc(s.openai.files, func(f OpenAIFile) bool { return f.ID == id })
}

func (s *Server) openaiGet(id string) *response {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.openaiFile(id)
	if i < 0 {
		return openaiNoFile(id)
	}
	return jsonResponse(http.StatusOK, fileJSON(s.openai.files[i]))
}

func (s *Server) openaiDelete(id string) *response {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.openaiFile(id)
	if i < 0 {
		return openaiNoFile(id)
	}
	s.openai.files = slices.Delete(s.openai.files, i, i+1)
	return jsonResponse(http.StatusOK, struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "file", true})
}

func openaiNoFile(id string) *response {
	return openaiError(http.StatusNotFound, "file_id", fmt.Sprintf("No such File object: %s", clip(id, 128)))
}

// openaiBatchJSON is a vector-store file batch as the API answers it.
type openaiBatchJSON struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	CreatedAt     int64  `json:"created_at"`
	VectorStoreID string `json:"vector_store_id"`
	Status        string `json:"status"`
	FileCounts    struct {
		InProgress int `json:"in_progress"`
		Completed  int `json:"completed"`
		Failed     int `json:"failed"`
		Cancelled  int `json:"cancelled"`
		Total      int `json:"total"`
	} `json:"file_counts"`
}

func batchJSON(b *OpenAIBatch) openaiBatchJSON {
	j := openaiBatchJSON{ID: b.ID, Object: "vector_store.files_batch", CreatedAt: b.CreatedAt,
		VectorStoreID: b.VectorStoreID, Status: "in_progress"}
	n := len(b.FileIDs)
	j.FileCounts.Total = n
	if b.Completed {
		j.Status = "completed"
		j.FileCounts.Completed = n
	} else {
		j.FileCounts.InProgress = n
	}
	return j
}

func (s *Server) openaiBatchCreate(vs string, body []byte, now time.Time) *response {
	var in struct {
		FileIDs []string `json:"file_ids"`
		Files   []struct {
			FileID string `json:"file_id"`
		} `json:"files"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return openaiError(http.StatusBadRequest, "", "The body must be one JSON object.")
	}
	ids := slices.Clone(in.FileIDs)
	for _, f := range in.Files {
		ids = append(ids, f.FileID)
	}
	if len(ids) == 0 || len(ids) > openaiMaxFileIDs {
		return openaiError(http.StatusBadRequest, "file_ids", "file_ids must hold 1 to 2000 file IDs.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.openaiFile(id) < 0 {
			return openaiNoFile(id)
		}
	}
	b := &OpenAIBatch{ID: fmt.Sprintf("vsfb_%06d", len(s.openai.batches)+1), VectorStoreID: vs,
		FileIDs: ids, CreatedAt: now.Unix()}
	s.openai.batches = append(s.openai.batches, b)
	return jsonResponse(http.StatusOK, batchJSON(b))
}

func (s *Server) openaiBatchGet(vs, id string) *response {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.openai.batches, func(b *OpenAIBatch) bool { return b.ID == id && b.VectorStoreID == vs })
	if i < 0 {
		return openaiError(http.StatusNotFound, "batch_id", fmt.Sprintf("No such vector store file batch: %s", clip(id, 128)))
	}
	b := s.openai.batches[i]
	b.Polls++
	if b.Polls > s.openai.polls {
		b.Completed = true
	}
	resp := jsonResponse(http.StatusOK, batchJSON(b))
	if !b.Completed {
		resp.header.Set("openai-poll-after-ms", "1000")
	}
	return resp
}

// openaiError is OpenAI's error body: {"error":{"message","type","param","code"}},
// of type invalid_request_error.
func openaiError(status int, param, msg string) *response {
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Type = msg, "invalid_request_error"
	if param != "" {
		e.Error.Param = &param
	}
	return jsonResponse(status, e)
}

// openaiHeaders adds the surface's headers to an answer: on the OpenAI
// routes, x-request-id and the rate-limit headers; on the 429 of a
// [Fault.WithRetryAfterMs] throttle (whatever its route), retry-after-ms
// and the exhausted limit.
func (s *Server) openaiHeaders(h http.Header, p string, f Fault, status int, id string, now time.Time) {
	_, surface := openaiPath(p)
	throttled := f.openai && status == http.StatusTooManyRequests
	if !surface && !throttled {
		return
	}
	s.mu.Lock()
	if m := now.Unix() / 60; m != s.openai.minute {
		s.openai.minute, s.openai.inMinute = m, 0
	}
	s.openai.inMinute++
	remaining := max(OpenAIRequestsPerMinute-s.openai.inMinute, 0)
	s.mu.Unlock()

	tokens := openaiTokensRemaining
	if throttled {
		if f.openaiMs > 0 {
			h.Set("retry-after-ms", strconv.FormatInt(f.openaiMs, 10))
		}
		if f.tokens {
			tokens = 0
		} else {
			remaining = 0
		}
	}
	if id != "" {
		h.Set("x-request-id", id)
	}
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(OpenAIRequestsPerMinute))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(remaining))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(tokens))
}
