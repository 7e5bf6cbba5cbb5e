package fakeserver

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits of the File inventory.
const (
	defaultListLimit = 10
	maxListLimit     = 1000
	maxFileNameLen   = 1024
)

// DefaultAccount is the storage account name a [Server] recognises, by
// default, as the first segment of a path-style URL: Azurite's
// devstoreaccount1. See [WithAccount].
const DefaultAccount = "devstoreaccount1"

// servicePath returns the path a request addresses within the account: p
// without a leading "/{account}" segment exactly equal to account ("": none),
// as [WithAccount] says.
func servicePath(account, p string) string {
	rest, ok := strings.CutPrefix(p, "/"+account)
	switch {
	case !ok || account == "":
		return p
	case rest == "":
		return "/"
	case rest[0] == '/':
		return rest
	}
	return p // a longer first segment, such as /devstoreaccount10
}

// classify returns the route of a request from its method, its service
// path ([servicePath]) and its raw query, as the package doc's table says.
func classify(method, p, rawQuery string) string {
	if route, ok := classifyOpenAI(method, p); ok { // openai.go
		return route
	}
	_, isIndex := indexName(p)
	_, _, isBlob := blobName(p)
	var write, read string // the route of PUT (POST for files) and of GET
	switch {
	case isIndex:
		write, read = RouteSearchPut, RouteSearchGet
	case p == "/files":
		write, read = RouteFileUpload, RouteFileList
	case isBlob && !isSearchOrFile(p) && !slices.Contains(queryKeys(rawQuery), "restype"):
		write, read = RouteBlobPut, RouteBlobGet
	}
	switch {
	case method == http.MethodGet && read != "":
		return read
	case method == routeMethod[write] && write != "":
		return write
	}
	return RouteOther
}

// indexName extracts the index name of /indexes/{name} or /indexes('{name}');
// ok reports whether p is one (the name is meaningless when not).
func indexName(p string) (name string, ok bool) {
	if rest, found := strings.CutPrefix(p, "/indexes/"); found {
		return rest, rest != "" && !strings.Contains(rest, "/")
	}
	rest, quoted := strings.CutPrefix(p, "/indexes('")
	name, closed := strings.CutSuffix(rest, "')")
	return name, quoted && closed && name != "" && !strings.ContainsAny(name, "/'")
}

// blobName splits /{container}/{blob...}; the blob name may hold slashes.
// ok reports whether p is one (the names are meaningless when not).
func blobName(p string) (container, blob string, ok bool) {
	container, blob, ok = strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return container, blob, ok && strings.HasPrefix(p, "/") && container != "" && blob != ""
}

// state is the in-memory services. The Server's mu guards it.
type state struct {
	indexes    map[string]*index
	files      []File
	fileByID   map[string]int
	fileBodies map[string][]byte // by digest
	blobs      map[string]*blobEntry
	version    uint64 // ETag source
	openai     openaiState
}

type index struct {
	definition []byte // JSON, with name and @odata.etag
	etag       string
}

type blobEntry struct {
	data         []byte
	etag         string
	contentType  string
	lastModified time.Time
}

func (st *state) init() {
	st.indexes = map[string]*index{}
	st.fileByID = map[string]int{}
	st.fileBodies = map[string][]byte{}
	st.blobs = map[string]*blobEntry{}
	st.openai.init()
}

// nextETag returns a fresh quoted ETag in the style of Azure Storage.
func (st *state) nextETag() string {
	st.version++
	return fmt.Sprintf(`"0x8D%013X"`, st.version)
}

// File is one entry of the File service's inventory.
type File struct {
	// ID is the file's identifier: "file-000001", in upload order.
	ID string `json:"id"`
	// Name is the x-ms-file-name of the upload, "" when none was given.
	Name string `json:"name,omitempty"`
	// Digest is "sha256:" and the hex SHA-256 of the content.
	Digest string `json:"digest"`
	// Bytes is the content length.
	Bytes int64 `json:"bytes"`
	// CreatedAt is the upload time (server clock), in Unix seconds.
	CreatedAt int64 `json:"created_at"`
}

// serveRoute answers a request the script left alone; p is its service
// path.
func (s *Server) serveRoute(route string, r *http.Request, p string, body []byte, now time.Time) *response {
	segs, isOpenAI := openaiPath(p) // openai.go
	switch route {
	case RouteSearchPut:
		return s.searchPut(r.Header, p, body)
	case RouteSearchGet:
		return s.searchGet(p)
	case RouteFileUpload:
		return s.fileUpload(r, body, now)
	case RouteFileList:
		return s.fileList(r)
	case RouteBlobPut:
		return s.blobPut(r, p, body, now)
	case RouteBlobGet:
		return s.blobGet(r, p)
	case RouteOpenAIFileUpload:
		return s.openaiUpload(r, body, now)
	case RouteOpenAIFileList:
		return s.openaiList(r)
	case RouteOpenAIFileGet:
		return s.openaiGet(segs[1])
	case RouteOpenAIFileDelete:
		return s.openaiDelete(segs[1])
	case RouteOpenAIBatchCreate:
		return s.openaiBatchCreate(segs[1], body, now)
	case RouteOpenAIBatchGet:
		return s.openaiBatchGet(segs[1], segs[3])
	}
	notAllowed := fmt.Sprintf("The method %s is not allowed on this resource.", sanitizeMethod(r.Method))
	_, isIndex := indexName(p)
	_, _, isBlob := blobName(p)
	switch {
	case isOpenAI:
		return openaiError(http.StatusMethodNotAllowed, "", notAllowed)
	case isIndex || p == "/files":
		return jsonError(http.StatusMethodNotAllowed, "MethodNotAllowed", notAllowed)
	case isBlob && !isSearchOrFile(p):
		return xmlError(http.StatusMethodNotAllowed, "UnsupportedHttpVerb",
			fmt.Sprintf("The resource doesn't support the specified HTTP verb %s.", sanitizeMethod(r.Method)))
	}
	return jsonError(http.StatusNotFound, "ResourceNotFound", "The requested resource does not exist.")
}

// isSearchOrFile reports whether p is under the Search or File routes.
func isSearchOrFile(p string) bool {
	return p == "/indexes" || strings.HasPrefix(p, "/indexes/") || strings.HasPrefix(p, "/indexes(") ||
		p == "/files" || strings.HasPrefix(p, "/files/")
}

func sanitizeMethod(m string) string {
	if len(m) > 32 || !isToken(m) {
		return "(invalid)"
	}
	return m
}

// --- Search ---------------------------------------------------------------

func (s *Server) searchPut(h http.Header, p string, body []byte) *response {
	name, _ := indexName(p)
	var def map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&def); err != nil || def == nil || dec.More() {
		return jsonError(http.StatusBadRequest, "InvalidRequestParameter",
			"The request is invalid. Details: definition : the index definition must be one JSON object.")
	}
	if v, ok := def["name"]; ok {
		if n, isStr := v.(string); !isStr || n != name {
			return jsonError(http.StatusBadRequest, "InvalidRequestParameter",
				"The request is invalid. Details: the index name in the body does not match the name in the URL.")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.indexes[name]
	if h.Get("If-None-Match") == "*" && exists {
		return jsonError(http.StatusPreconditionFailed, "PreconditionFailed", "The index already exists.")
	}
	if im := h.Get("If-Match"); im != "" && (!exists || (im != "*" && im != old.etag)) {
		return jsonError(http.StatusPreconditionFailed, "PreconditionFailed", "The index's ETag does not match.")
	}
	etag := s.nextETag()
	def["name"] = name
	def["@odata.etag"] = etag
	stored, err := json.Marshal(def)
	if err != nil {
		return jsonError(http.StatusBadRequest, "InvalidRequestParameter", "The request is invalid.")
	}
	s.indexes[name] = &index{definition: stored, etag: etag}
	status := http.StatusCreated
	if exists {
		status = http.StatusOK
	}
	resp := searchJSON(status, stored)
	if strings.Contains(strings.ToLower(h.Get("Prefer")), "return=minimal") {
		resp = newResponse(http.StatusNoContent)
		resp.header.Set("Preference-Applied", "return=minimal")
	}
	resp.header.Set("ETag", etag)
	return resp
}

func (s *Server) searchGet(p string) *response {
	name, _ := indexName(p)
	s.mu.Lock()
	ix, ok := s.indexes[name]
	s.mu.Unlock()
	if !ok {
		return jsonError(http.StatusNotFound, "ResourceNotFound",
			fmt.Sprintf("No index with the name '%s' was found in the service.", clip(name, 128)))
	}
	resp := searchJSON(http.StatusOK, ix.definition)
	resp.header.Set("ETag", ix.etag)
	return resp
}

func searchJSON(status int, body []byte) *response {
	resp := newResponse(status)
	resp.header.Set("Content-Type", "application/json; odata.metadata=minimal; odata.streaming=true")
	resp.header.Set("OData-Version", "4.0")
	resp.body = body
	return resp
}

// --- File -----------------------------------------------------------------

func (s *Server) fileUpload(r *http.Request, body []byte, now time.Time) *response {
	name := r.Header.Get("x-ms-file-name")
	if len(name) > maxFileNameLen || strings.ContainsAny(name, "\x00\r\n") {
		return jsonError(http.StatusBadRequest, "InvalidFileName", "The x-ms-file-name header is too long or holds control characters.")
	}
	f := s.addFile(name, body, now)
	return jsonResponse(http.StatusCreated, f)
}

// addFile stores an upload.
func (s *Server) addFile(name string, body []byte, now time.Time) File {
	digest := digestOf(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := File{
		ID:        fmt.Sprintf("file-%06d", len(s.files)+1),
		Name:      name,
		Digest:    digest,
		Bytes:     int64(len(body)),
		CreatedAt: now.Unix(),
	}
	if _, ok := s.fileBodies[digest]; !ok {
		s.fileBodies[digest] = bytes.Clone(body)
	}
	s.fileByID[f.ID] = len(s.files)
	s.files = append(s.files, f)
	return f
}

// fileListPage is the JSON of GET /files.
type fileListPage struct {
	Value    []File `json:"value"`
	Next     string `json:"next,omitempty"`
	NextLink string `json:"nextLink,omitempty"`
}

func (s *Server) fileList(r *http.Request) *response {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return jsonError(http.StatusBadRequest, "InvalidQueryParameterValue", "The query string is malformed.")
	}
	limit, err := strconv.Atoi(cmp.Or(q.Get("limit"), strconv.Itoa(defaultListLimit)))
	if err != nil || limit < 1 {
		return jsonError(http.StatusBadRequest, "InvalidQueryParameterValue", "limit must be an integer of at least 1.")
	}
	limit = min(limit, maxListLimit)
	s.mu.Lock()
	defer s.mu.Unlock()
	start := 0
	if after := q.Get("after"); after != "" {
		i, ok := s.fileByID[after]
		if !ok {
			return jsonError(http.StatusBadRequest, "InvalidCursor", "The after cursor names no file.")
		}
		start = i + 1
	}
	end := min(start+limit, len(s.files))
	page := fileListPage{Value: append(make([]File, 0, end-start), s.files[start:end]...)}
	if end < len(s.files) {
		page.Next = page.Value[len(page.Value)-1].ID
		next := url.Values{"after": {page.Next}, "limit": {strconv.Itoa(limit)}}
		if v := q.Get("api-version"); v != "" {
			next.Set("api-version", v)
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		// The request's own path: "/files", or "/{account}/files".
		page.NextLink = (&url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: next.Encode()}).String()
	}
	return jsonResponse(http.StatusOK, page)
}

// --- Blob -----------------------------------------------------------------

func (s *Server) blobPut(r *http.Request, p string, body []byte, now time.Time) *response {
	c, b, _ := blobName(p)
	ct := cmp.Or(r.Header.Get("x-ms-blob-content-type"), r.Header.Get("Content-Type"), defaultBlobType)
	key := c + "/" + b
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.blobs[key]
	if r.Header.Get("If-None-Match") == "*" && exists {
		return xmlError(http.StatusConflict, "BlobAlreadyExists", "The specified blob already exists.")
	}
	if im := r.Header.Get("If-Match"); im != "" && (!exists || (im != "*" && im != old.etag)) {
		return xmlError(http.StatusPreconditionFailed, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")
	}
	e := &blobEntry{data: bytes.Clone(body), etag: s.nextETag(), contentType: ct, lastModified: now.UTC()}
	s.blobs[key] = e
	resp := blobResponse(http.StatusCreated, e, r)
	sum := md5.Sum(body)
	resp.header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	resp.header.Set("x-ms-request-server-encrypted", "true")
	return resp
}

func (s *Server) blobGet(r *http.Request, p string) *response {
	c, b, _ := blobName(p)
	s.mu.Lock()
	e, ok := s.blobs[c+"/"+b]
	s.mu.Unlock()
	if !ok {
		return xmlError(http.StatusNotFound, "BlobNotFound", "The specified blob does not exist.")
	}
	if im := r.Header.Get("If-Match"); im != "" && im != "*" && im != e.etag {
		return xmlError(http.StatusPreconditionFailed, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == "*" || inm == e.etag) {
		resp := newResponse(http.StatusNotModified)
		resp.header.Set("ETag", e.etag)
		return resp
	}
	resp := blobResponse(http.StatusOK, e, r)
	resp.body = e.data
	resp.header.Set("Content-Type", e.contentType)
	resp.header.Set("x-ms-blob-type", "BlockBlob")
	return resp
}

// blobResponse is an answer about blob e with its ETag, Last-Modified and
// the request's x-ms-version (a default for none or an odd one).
func blobResponse(status int, e *blobEntry, r *http.Request) *response {
	resp := newResponse(status)
	resp.header.Set("ETag", e.etag)
	resp.header.Set("Last-Modified", e.lastModified.Format(http.TimeFormat))
	v := r.Header.Get("x-ms-version")
	if len(v) > 32 || !isToken(v) { // "" is no token
		v = "2025-01-05"
	}
	resp.header.Set("x-ms-version", v)
	return resp
}

// --- Error bodies ---------------------------------------------------------

type jsonErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// jsonError is an Azure-style JSON error: {"error":{"code":..,"message":..}}.
func jsonError(status int, code, msg string) *response {
	var e jsonErrorBody
	e.Error.Code, e.Error.Message = code, msg
	resp := jsonResponse(status, e)
	resp.header.Set("x-ms-error-code", code)
	return resp
}

// xmlError is an Azure Storage XML error.
func xmlError(status int, code, msg string) *response {
	var b bytes.Buffer
	b.WriteString(xml.Header)
	b.WriteString("<Error><Code>")
	_ = xml.EscapeText(&b, []byte(code))
	b.WriteString("</Code><Message>")
	_ = xml.EscapeText(&b, []byte(msg))
	b.WriteString("</Message></Error>")
	resp := newResponse(status)
	resp.header.Set("Content-Type", "application/xml")
	resp.header.Set("x-ms-error-code", code)
	resp.body = b.Bytes()
	return resp
}

func jsonResponse(status int, v any) *response {
	b, err := json.Marshal(v)
	if err != nil { // unreachable: the values are plain structs
		b = []byte(`{}`)
	}
	resp := newResponse(status)
	resp.header.Set("Content-Type", "application/json; charset=utf-8")
	resp.body = b
	return resp
}

// errorFor answers status with the route's error format.
func errorFor(route string, status int, code, msg string) *response {
	if route == RouteBlobPut || route == RouteBlobGet {
		return xmlError(status, code, msg)
	}
	return jsonError(status, code, msg)
}

// faultResponse builds the answer of a replacing fault.
func faultResponse(f Fault, route, id string, now time.Time) *response {
	var resp *response
	switch f.kind {
	case kindThrottle:
		resp = errorFor(route, http.StatusTooManyRequests, "TooManyRequests",
			"The request was throttled (scripted by fakeserver). Retry after the time the Retry-After header names.")
		if vals := f.retryAfter.Values(now); vals != nil {
			resp.header["Retry-After"] = vals
		}
		if ms, ok := f.retryAfter.millis(); ok {
			resp.header.Set("retry-after-ms", ms)
		}
	case kindServerBusy:
		resp = serverBusyResponse(id, now)
	case kindStatus:
		code, msg := "InternalError", "The server encountered an internal error (scripted by fakeserver)."
		switch f.status {
		case http.StatusServiceUnavailable:
			code, msg = "ServerBusy", "The server is currently unable to receive requests (scripted by fakeserver)."
		case http.StatusBadGateway:
			code = "BadGateway"
		case http.StatusGatewayTimeout:
			code = "GatewayTimeout"
		default:
			if f.status < 500 {
				code = strings.ReplaceAll(http.StatusText(f.status), " ", "")
				msg = "The request failed (scripted by fakeserver)."
			}
		}
		resp = errorFor(route, f.status, code, msg)
	case kindRedirect:
		resp = newResponse(f.status)
		resp.header.Set("Location", f.location)
		resp.header.Set("Content-Type", "text/html; charset=utf-8")
		var href bytes.Buffer
		_ = xml.EscapeText(&href, []byte(f.location))
		resp.body = []byte("<a href=\"" + href.String() + "\">" + http.StatusText(f.status) + "</a>.\n")
		return resp
	}
	resp.size = f.bodySize
	return resp
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// --- Seeding and inspection -----------------------------------------------

// AddFile stores body in the File service as if uploaded with name (the
// x-ms-file-name), without a request, and returns its inventory entry. Use
// it to seed an inventory of several pages.
func (s *Server) AddFile(name string, body []byte) File {
	return s.addFile(name, body, s.now())
}

// Files returns the File inventory in its stable (upload) order.
func (s *Server) Files() []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.files)
}

// FileContent returns the content stored under digest ("sha256:...").
func (s *Server) FileContent(digest string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.fileBodies[digest]
	return bytes.Clone(b), ok
}

// PutIndex stores a Search index definition (one JSON object) under name,
// without a request. It returns an error for a definition that is not a
// JSON object or whose "name" differs.
func (s *Server) PutIndex(name string, definition []byte) error {
	if name == "" || strings.ContainsAny(name, "/'") {
		return fmt.Errorf("fakeserver: invalid index name %q", name)
	}
	resp := s.searchPut(http.Header{}, "/indexes/"+name, definition)
	if resp.status >= 300 {
		return fmt.Errorf("fakeserver: index %q: %s", name, resp.body)
	}
	return nil
}

// Index returns the stored definition of a Search index (with its "name"
// and "@odata.etag").
func (s *Server) Index(name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, ok := s.indexes[name]
	if !ok {
		return nil, false
	}
	return bytes.Clone(ix.definition), true
}

// PutBlob stores data as container/blob, without a request, and returns its
// ETag.
func (s *Server) PutBlob(container, blob string, data []byte) string {
	return s.putBlob(container, blob, data, "")
}

// putBlob stores a blob with its content type ("" is
// application/octet-stream).
func (s *Server) putBlob(container, blob string, data []byte, contentType string) string {
	now := s.now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &blobEntry{data: bytes.Clone(data), etag: s.nextETag(), contentType: cmp.Or(contentType, defaultBlobType), lastModified: now}
	s.blobs[container+"/"+blob] = e
	return e.etag
}

// Blob returns the content and ETag of container/blob.
func (s *Server) Blob(container, blob string) (data []byte, etag string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.blobs[container+"/"+blob]
	if !ok {
		return nil, "", false
	}
	return bytes.Clone(e.data), e.etag, true
}
