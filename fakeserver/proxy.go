package fakeserver

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// NewProxy returns a Server in proxy mode: every request is recorded and
// matched against script (nil: an empty one) as by [New], and what the
// script leaves alone is forwarded to upstream by an httputil.ReverseProxy
// and answered with the upstream's response, unchanged (its own
// x-ms-request-id, which the ledger records, and Date).
//
// Forwarding keeps the method, the path (joined behind upstream's own), the
// query, the headers and the body; only Host becomes upstream's, and
// hop-by-hop and X-Forwarded-* headers are dropped. Shared Key signatures do
// not sign the Host, so they still verify (give an upstream URL without a
// path). Replacing faults answer without reaching the upstream, with the
// fake's headers; slow and stalled bodies apply to the upstream's body; an
// unreachable upstream is answered 502. Route names and the admin routes
// apply as for [New]. It panics on a nil upstream.
func NewProxy(upstream *url.URL, script *Script, opts ...Option) *Server {
	if upstream == nil {
		panic("fakeserver: NewProxy: nil upstream")
	}
	cfg := newConfig(opts...)
	if script != nil {
		cfg.script = script
	}
	u := *upstream
	s := &Server{cfg: cfg, upstream: &u}
	s.init()
	rt := cfg.upstreamT
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true // no transparent gunzip: bodies pass unchanged
		s.ownedProxy = t
		rt = t
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(s.upstream) // also sets Out.Host = "" → the upstream's host
		},
		Transport:      rt,
		FlushInterval:  -1,
		ErrorLog:       log.New(io.Discard, "", 0),
		ModifyResponse: s.proxyResponse,
		ErrorHandler:   s.proxyError,
	}
	return s
}

// Upstream returns the upstream URL of a proxy, nil for [New]'s server.
func (s *Server) Upstream() *url.URL {
	if s.upstream == nil {
		return nil
	}
	u := *s.upstream
	return &u
}

type proxyKey struct{}

// proxyInfo travels from forward to the ReverseProxy hooks.
type proxyInfo struct {
	ctx   context.Context // ends when the client goes or the server closes
	entry int
	route string
	fault Fault
	now   time.Time
}

// forward hands a request the script left alone (or gave a body fault) to
// the upstream.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, body []byte, entry int, route string, f Fault, now time.Time) {
	info := &proxyInfo{ctx: r.Context(), entry: entry, route: route, fault: f, now: now}
	out := r.WithContext(context.WithValue(r.Context(), proxyKey{}, info))
	// The body was read for its digest; replay it. ContentLength stays as
	// the client sent it (a chunked request stays chunked).
	if len(body) == 0 && r.ContentLength <= 0 {
		out.Body = http.NoBody
	} else {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.proxy.ServeHTTP(w, out)
}

func infoFrom(ctx context.Context) *proxyInfo {
	info, _ := ctx.Value(proxyKey{}).(*proxyInfo)
	return info
}

// proxyResponse records the upstream's answer and applies a body fault.
func (s *Server) proxyResponse(resp *http.Response) error {
	info := infoFrom(resp.Request.Context())
	if info == nil {
		return nil
	}
	s.finish(info.entry, resp.StatusCode, upstreamRequestID(resp.Header))
	// The ReverseProxy flushes the headers at once (FlushInterval -1), then
	// copies the body as these readers give it.
	switch info.fault.kind {
	case kindSlowBody:
		resp.Body = &slowBody{rc: resp.Body, ctx: info.ctx, chunk: info.fault.chunk, delay: info.fault.delay}
	case kindStalledBody:
		resp.Body = &stalledBody{rc: resp.Body, ctx: info.ctx}
	}
	return nil
}

func upstreamRequestID(h http.Header) string {
	for _, k := range []string{"X-Ms-Request-Id", "Request-Id", "X-Request-Id", "Apim-Request-Id"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// proxyError answers 502 when the upstream cannot be reached. A request
// whose client gave up (its context ended) is not answered: the ledger
// records it as abandoned, status 0.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	info := infoFrom(r.Context())
	if info == nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if r.Context().Err() != nil {
		s.mu.Lock()
		s.ledger[info.entry].Outcome = OutcomeAbandoned
		s.mu.Unlock()
		s.finish(info.entry, 0, "")
		return
	}
	resp := errorFor(info.route, http.StatusBadGateway, "BadGateway", "The upstream could not be reached (fakeserver proxy).")
	id := s.newRequestID()
	setCommonHeaders(resp.header, info.route, id, info.now)
	s.finish(info.entry, resp.status, id)
	s.emit(info.ctx, w, r, resp, Fault{})
}

// slowBody trickles an upstream body: chunk bytes after each delay.
type slowBody struct {
	rc    io.ReadCloser
	ctx   context.Context
	chunk int
	delay time.Duration
	buf   []byte
	err   error
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(b.buf) == 0 && b.err == nil {
		// Read the next chunk ahead, so that the end costs no extra delay.
		b.buf = make([]byte, b.chunk)
		n, err := io.ReadFull(b.rc, b.buf)
		b.buf = b.buf[:n]
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		b.err = err
	}
	if len(b.buf) == 0 {
		return 0, b.err
	}
	if !sleepCtx(b.ctx, b.delay) {
		return 0, context.Cause(b.ctx)
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *slowBody) Close() error { return b.rc.Close() }

// stalledBody blocks until the exchange ends.
type stalledBody struct {
	rc  io.ReadCloser
	ctx context.Context
}

func (b *stalledBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

func (b *stalledBody) Close() error { return b.rc.Close() }
