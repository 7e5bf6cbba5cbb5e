package fakeserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxRequestBody bounds the request body the server reads; a longer body is
// answered 413.
const maxRequestBody = 64 << 20

// ErrServerClosed is returned by [Server.Transport] round trips after
// [Server.Close], and by reads of a response body that the closing server
// cut (wrapped with io.ErrUnexpectedEOF).
var ErrServerClosed = errors.New("fakeserver: server closed")

// Option configures a [Server].
type Option func(*config)

type config struct {
	now       func() time.Time
	script    *Script
	observer  func(Request)
	upstreamT http.RoundTripper
	account   string
}

func newConfig(opts ...Option) config {
	c := config{now: time.Now, account: DefaultAccount}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithClock sets the server's clock, which stamps arrivals, Date headers,
// date-form Retry-After values and the rules by time and by rate. Default
// time.Now (inside testing/synctest, the bubble's clock); nil is ignored.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithScript sets the fault script. Default: an empty script, which
// [Server.Script] returns for adding rules. A nil s is ignored.
func WithScript(s *Script) Option {
	return func(c *config) {
		if s != nil {
			c.script = s
		}
	}
}

// WithAccount sets the storage account name recognised as the first
// segment of a path, Azurite's layout /{account}/{container}/{blob} (and
// /{account}/files, /{account}/indexes/{name}): a request whose first
// segment is exactly name is served as the path after it, any other as its
// plain path, so [Server.PutBlob]("checkpoints", "a.json", ...) is read at
// /checkpoints/a.json and at /devstoreaccount1/checkpoints/a.json. The
// account segment always wins (a container named like the account is
// /devstoreaccount1/devstoreaccount1/b). The ledger and [MatchPath] see the
// whole path. Default [DefaultAccount]; "" recognises none.
func WithAccount(name string) Option {
	return func(c *config) { c.account = name }
}

// WithObserver calls f with each ledger entry once its status is known
// (before the response body is sent; for a reset, with status 0). f runs on
// the request's goroutine, possibly concurrently with itself, and must not
// block. Default none; a nil f is ignored.
func WithObserver(f func(Request)) Option {
	return func(c *config) {
		if f != nil {
			c.observer = f
		}
	}
}

// WithUpstreamTransport sets the transport a proxy ([NewProxy]) forwards
// with, such as another Server's [Server.Transport] (for a proxy test in a
// testing/synctest bubble). Default: a clone of http.DefaultTransport
// without transparent compression, closed with the server. Nil is ignored.
func WithUpstreamTransport(rt http.RoundTripper) Option {
	return func(c *config) {
		if rt != nil {
			c.upstreamT = rt
		}
	}
}

// Server is the fake: an http.Handler with in-memory state (or, from
// [NewProxy], a proxy), a fault [Script] and a ledger of every request. It
// is safe for concurrent use; Close it when done.
type Server struct {
	cfg    config
	script *Script

	// Proxy mode only.
	upstream   *url.URL
	proxy      *httputil.ReverseProxy
	ownedProxy *http.Transport

	idPrefix uint32
	idSeq    atomic.Uint64
	maxBody  int // maxRequestBody; lowered by tests

	baseCtx    context.Context
	cancelBase context.CancelCauseFunc
	active     sync.WaitGroup // handler runs
	conns      connTracker    // listener connections

	mu         sync.Mutex
	closed     bool
	ledger     []Request
	routeCount map[string]int
	state      // in-memory services, guarded by mu
	httpSrv    *http.Server
	baseURL    string
}

// New returns a fake Azure-like server with empty state.
func New(opts ...Option) *Server {
	s := &Server{cfg: newConfig(opts...)}
	s.init()
	return s
}

func (s *Server) init() {
	s.script = cmp.Or(s.cfg.script, &Script{})
	s.idPrefix = rand.Uint32() // tells servers' request IDs apart; no secret
	s.baseCtx, s.cancelBase = context.WithCancelCause(context.Background())
	s.routeCount = map[string]int{}
	s.maxBody = maxRequestBody
	s.state.init()
}

// Script returns the server's fault script, to add rules to.
func (s *Server) Script() *Script { return s.script }

// now reads the server clock.
func (s *Server) now() time.Time { return s.cfg.now() }

// newRequestID returns a fresh x-ms-request-id: UUID-shaped, a random
// per-server prefix and a sequence number, so that IDs sort by issue.
func (s *Server) newRequestID() string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", s.idPrefix, s.idSeq.Add(1))
}

// Start serves on a new loopback listener at 127.0.0.1:0 and returns the
// base URL, "http://127.0.0.1:PORT".
func (s *Server) Start() (string, error) { return s.Listen("127.0.0.1:0") }

// Listen serves on a new TCP listener at addr and returns the base URL,
// "http://HOST:PORT". A Server listens at most once.
func (s *Server) Listen(addr string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrServerClosed
	}
	if s.httpSrv != nil {
		return "", errors.New("fakeserver: already listening")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fakeserver: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 20,
		ErrorLog: log.New(io.Discard, "", 0), ConnState: s.conns.track}
	s.httpSrv, s.baseURL = srv, "http://"+l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	return s.baseURL, nil
}

// URL returns the base URL of the listener, "" before [Server.Start].
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseURL
}

// Close stops the server at once: the listener and its connections close,
// stalled and slow bodies end (in-process ones with [ErrServerClosed]), and
// it returns when every handler and connection goroutine has ended, so
// that goroutine leak checks pass. Close is idempotent.
func (s *Server) Close() error { return s.stop((*http.Server).Close) }

// Shutdown stops the server gracefully: stalled and slow bodies end at
// once, other requests in flight complete, then the connections close.
// When ctx ends first, it closes as [Server.Close] and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.stop(func(srv *http.Server) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		return err
	})
}

// stop closes the server: it ends the bodies, stops the listener with
// stopListener, waits for the handlers and the connections, then closes
// the proxy's own idle upstream connections.
func (s *Server) stop(stopListener func(*http.Server) error) error {
	s.mu.Lock()
	s.closed = true
	srv := s.httpSrv
	s.mu.Unlock()
	s.cancelBase(ErrServerClosed)
	var err error
	if srv != nil {
		err = stopListener(srv)
	}
	s.active.Wait()
	s.conns.wait(5 * time.Second)
	if s.ownedProxy != nil {
		s.ownedProxy.CloseIdleConnections()
	}
	return err
}

// connTracker counts the listener's open connections.
type connTracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n == 0; nil means closed
}

// track is the http.Server's ConnState hook.
func (c *connTracker) track(_ net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st {
	case http.StateNew:
		if c.n == 0 {
			c.zero = make(chan struct{})
		}
		c.n++
	case http.StateClosed, http.StateHijacked:
		c.n--
		if c.n == 0 {
			close(c.zero)
		}
	}
}

// wait returns when no connection is open, or after d.
func (c *connTracker) wait(d time.Duration) {
	c.mu.Lock()
	zero, n := c.zero, c.n
	c.mu.Unlock()
	if n == 0 { // zero is nil or closed
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	}
}

// enter registers a handler run; false once the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active.Add(1)
	return true
}

// ServeHTTP serves one request: it reads the body, asks the script for a
// fault, records the request in the ledger, and answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		w.Header().Set("Connection", "close")
		http.Error(w, "fakeserver: server closed", http.StatusServiceUnavailable)
		return
	}
	defer s.active.Done()
	if isAdmin(r.URL.Path) {
		s.serveAdmin(w, r) // not Azure traffic: no ledger, no script
		return
	}
	// End slow and stalled bodies when the server closes.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.baseCtx, func() { cancel(ErrServerClosed) })
	defer stop()
	r = r.WithContext(ctx)

	now := s.now()
	body, readErr := readBody(r, s.maxBody)
	svc := servicePath(s.cfg.account, r.URL.Path)
	route := classify(r.Method, svc, r.URL.RawQuery)
	digest := ""
	if readErr == nil {
		digest = digestOf(body)
	}
	v := s.script.match(matchInput{route: route, method: r.Method, path: r.URL.Path, now: now,
		account: requestAccount(s.cfg.account, r.URL.Path, r.Host), host: r.Host})
	fault := v.fault

	// The fake answers with its own request ID, except a reset (no answer)
	// and a forwarded request (the upstream's answer, recorded later).
	forwarded := s.proxy != nil && !fault.replaces() && readErr == nil
	id := ""
	if fault.kind != kindReset && !forwarded {
		id = s.newRequestID()
	}
	entry := s.record(Request{Method: r.Method, Route: route, Path: r.URL.Path, QueryKeys: queryKeys(r.URL.RawQuery),
		Arrived: now, RequestID: id, Fault: fault.String(), Rule: v.rule, BodyDigest: digest,
		BodySize: int64(len(body)), Decisions: v.decisions})

	if fault.kind == kindReset {
		s.finish(entry, 0, "")
		resetConn(w)
		return
	}

	var resp *response
	switch {
	case fault.replaces():
		resp = faultResponse(fault, route, id, now)
	case errors.Is(readErr, errBodyTooLarge):
		resp = errorFor(route, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "The request body is too large.")
	case readErr != nil:
		resp = errorFor(route, http.StatusBadRequest, "InvalidInput", "The request body could not be read.")
	case forwarded:
		s.forward(w, r, body, entry, route, fault, now)
		return
	default:
		resp = s.serveRoute(route, r, svc, body, now)
	}
	s.openaiHeaders(resp.header, svc, fault, resp.status, id, now) // openai.go
	setQuotaHeaders(resp.header, r.Method, v.decisions)            // rate.go
	setCommonHeaders(resp.header, route, id, now)
	s.finish(entry, resp.status, "")
	s.emit(ctx, w, r, resp, fault)
}

// readBody reads the whole request body, up to limit bytes.
func readBody(r *http.Request, limit int) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	return readAtMost(r.Body, int64(limit))
}

var errBodyTooLarge = errors.New("request body too large")

// digestOf is "sha256:" and the hex SHA-256 of b.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readAtMost reads r whole; more than limit bytes is errBodyTooLarge.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, errBodyTooLarge
	}
	return b, err
}

// record appends a ledger entry and returns its index.
func (s *Server) record(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routeCount[r.Route]++
	r.Seq = len(s.ledger) + 1
	r.Ordinal = s.routeCount[r.Route]
	s.ledger = append(s.ledger, r)
	return len(s.ledger) - 1
}

// finish sets the status (and, when not empty, the request ID) of a ledger
// entry and tells the observer.
func (s *Server) finish(i, status int, requestID string) {
	s.mu.Lock()
	s.ledger[i].Status = status
	if requestID != "" {
		s.ledger[i].RequestID = requestID
	}
	r := s.ledger[i].clone()
	s.mu.Unlock()
	if s.cfg.observer != nil {
		s.cfg.observer(r)
	}
}

// response is an answer built in memory before it is sent.
type response struct {
	status int
	header http.Header
	body   []byte
	// size, when >= 0, is the exact body length: body padded with spaces or
	// cut.
	size int
}

func newResponse(status int) *response {
	return &response{status: status, header: http.Header{}, size: -1}
}

// setCommonHeaders adds what every answer of the fake carries.
func setCommonHeaders(h http.Header, route, id string, now time.Time) {
	h.Set("x-ms-request-id", id)
	if route == RouteSearchPut || route == RouteSearchGet {
		h.Set("request-id", id)
	}
	h.Set("Date", now.UTC().Format(http.TimeFormat))
}

// emit sends resp, applying a body fault.
func (s *Server) emit(ctx context.Context, w http.ResponseWriter, r *http.Request, resp *response, f Fault) {
	h := w.Header()
	maps.Copy(h, resp.header)
	noBody := r.Method == http.MethodHead || resp.status == http.StatusNoContent || resp.status == http.StatusNotModified
	if n := len(resp.body); !noBody {
		if resp.size >= 0 {
			n = resp.size
		}
		h.Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(resp.status)
	if noBody {
		return
	}
	rc := http.NewResponseController(w)
	switch f.kind {
	case kindStalledBody:
		_ = rc.Flush()
		<-ctx.Done()
	case kindSlowBody:
		_ = rc.Flush()
		for chunk := range slices.Chunk(resp.body, f.chunk) {
			if !sleepCtx(ctx, f.delay) {
				return
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = rc.Flush()
		}
	default:
		if resp.size < 0 {
			_, _ = w.Write(resp.body)
		} else { // padded with spaces or cut
			_, _ = io.CopyN(w, io.MultiReader(bytes.NewReader(resp.body), spaces{}), int64(resp.size))
		}
	}
}

// spaces reads as endless spaces: an error body's padding.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// resetter is implemented by the in-process response writer.
type resetter interface{ resetConn() }

// resetConn aborts the exchange without an answer: in-process, the round
// trip fails with ECONNRESET; over TCP, the connection is closed with
// SO_LINGER 0 (a RST); otherwise the handler aborts.
func resetConn(w http.ResponseWriter) {
	if rs, ok := w.(resetter); ok {
		rs.resetConn()
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
