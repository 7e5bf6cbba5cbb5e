package fakeserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// Transport returns an http.RoundTripper that serves s in-process, without
// sockets: each round trip runs the handler on its own goroutine and
// streams the body through an io.Pipe, so a slow body arrives as slowly as
// scripted, and inside a testing/synctest bubble (create the Server there
// too) on the bubble's clock.
//
// The round trip behaves like a network one: a real *http.Response (Proto
// "HTTP/1.1"); the request body always closed; a done request context
// fails the round trip, or a body being read, with its error; a scripted
// reset fails with an error that errors.Is syscall.ECONNRESET; after
// [Server.Close], [ErrServerClosed]. Close every response body: that ends
// the handler. Every request reaches s, whatever its URL; the handler sees
// Host req.Host, else req.URL.Host.
func (s *Server) Transport() http.RoundTripper { return &inProcess{s: s} }

type inProcess struct{ s *Server }

// errBodyClosed ends the handler of a response whose body the client closed.
var errBodyClosed = errors.New("fakeserver: response body closed")

// errServerClosedEOF is what a body cut by a closing server reads.
var errServerClosedEOF = fmt.Errorf("%w: %w", ErrServerClosed, io.ErrUnexpectedEOF)

func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	closeReqBody := sync.OnceFunc(func() {
		if req.Body != nil {
			_ = req.Body.Close()
		}
	})
	if req.URL == nil {
		closeReqBody()
		return nil, errors.New("fakeserver: nil Request.URL")
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeReqBody()
		return nil, err
	}
	if !t.s.enter() {
		closeReqBody()
		return nil, ErrServerClosed
	}

	hctx, cancel := context.WithCancelCause(ctx)
	stopSrv := context.AfterFunc(t.s.baseCtx, func() { cancel(errServerClosedEOF) })
	// endErr is the error a body read gets once the exchange is cut: the
	// request's context error, else why hctx ended (server closed, body
	// closed); nil while it runs.
	endErr := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return context.Cause(hctx) // nil while hctx runs
	}
	pr, pw := io.Pipe()
	stopPipe := context.AfterFunc(hctx, func() {
		// Closing the write half hands the error to the reader and
		// unblocks a handler writing.
		pw.CloseWithError(endErr())
	})
	cleanup := func() { stopSrv(); stopPipe() }

	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{}), method: req.Method, srvCtx: t.s.baseCtx, endErr: endErr}
	sreq := serverRequest(hctx, req)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.s.active.Done()
		defer closeReqBody()
		defer func() {
			if p := recover(); p != nil {
				w.abort(fmt.Errorf("fakeserver: handler aborted: %v", p))
				return
			}
			w.finish()
		}()
		t.s.ServeHTTP(w, sreq)
	}()

	select {
	case <-w.ready:
	case <-hctx.Done():
		select {
		case <-w.ready:
		default:
			// Done before any header: fail the round trip. Closing the
			// request body unblocks a handler still reading it.
			cancel(nil)
			closeReqBody()
			<-done
			cleanup()
			return nil, endErr()
		}
	}
	// ready is closed: status, snapshot, declared and err are set.
	if w.err != nil {
		cancel(w.err)
		<-done
		cleanup()
		return nil, w.err
	}

	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.snapshot,
		ContentLength: w.declared,
		Request:       req,
		Body:          &pipeBody{pr: pr, cancel: cancel, done: done, cleanup: cleanup},
	}
	if w.status == http.StatusNoContent || w.status == http.StatusNotModified {
		resp.ContentLength = 0
	}
	if req.URL.Scheme == "https" {
		resp.TLS = &tls.ConnectionState{HandshakeComplete: true}
	}
	return resp, nil
}

// serverRequest turns a client request into what a handler sees from
// net/http's server.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	r := req.Clone(ctx)
	r.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	r.URL.Path = cmp.Or(r.URL.Path, "/")
	r.RequestURI = r.URL.RequestURI()
	r.Host = cmp.Or(req.Host, req.URL.Host)
	r.RemoteAddr = "in-process"
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.GetBody = nil
	r.Response = nil
	r.Close = false
	r.TLS = nil
	if req.URL.Scheme == "https" {
		r.TLS = &tls.ConnectionState{HandshakeComplete: true}
	}
	if req.Body == nil || req.Body == http.NoBody {
		r.Body = http.NoBody
		r.ContentLength = 0
	} else {
		// The round trip closes the client's body when the handler returns.
		r.Body = io.NopCloser(req.Body)
	}
	return r
}

// pipeWriter is the handler's http.ResponseWriter for an in-process round
// trip. Only the handler goroutine calls its methods; the round trip reads
// status, snapshot, declared and err after ready is closed.
type pipeWriter struct {
	header   http.Header
	pw       *io.PipeWriter
	ready    chan struct{}
	method   string
	srvCtx   context.Context
	endErr   func() error
	wrote    bool
	status   int
	snapshot http.Header
	declared int64 // Content-Length, -1 when not declared
	written  int64
	err      error // the round trip's error when no header was sent
}

var _ http.Flusher = (*pipeWriter)(nil) // asked for by http.NewResponseController

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("fakeserver: invalid WriteHeader code %v", code))
	}
	if code < 200 {
		return // informational answers are not delivered in-process
	}
	w.wrote = true
	w.status = code
	w.snapshot = w.header.Clone()
	w.declared = -1
	if n, err := strconv.ParseInt(w.snapshot.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		w.declared = n
	}
	close(w.ready)
}

func (w *pipeWriter) bodyAllowed() bool {
	return w.method != http.MethodHead && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	n, err := w.pw.Write(p)
	w.written += int64(n)
	return n, err
}

// Flush does nothing: the pipe delivers every write as it is made.
func (w *pipeWriter) Flush() {}

// resetConn fails the round trip, or cuts a body already started, with
// ECONNRESET.
func (w *pipeWriter) resetConn() {
	err := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	w.abort(err)
}

// abort ends the exchange with err.
func (w *pipeWriter) abort(err error) {
	if !w.wrote {
		w.wrote = true
		w.err = err
		close(w.ready)
	}
	w.pw.CloseWithError(err)
}

// finish ends the body when the handler returns: a body shorter than its
// Content-Length is an unexpected EOF, as on a real connection.
func (w *pipeWriter) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	err := w.endErr()
	if err == nil && w.err == nil && w.bodyAllowed() && w.declared >= 0 && w.written < w.declared {
		err = io.ErrUnexpectedEOF
		if w.srvCtx.Err() != nil {
			err = errServerClosedEOF
		}
	}
	w.pw.CloseWithError(err) // nil: a clean EOF
}

// pipeBody is the client's response body of an in-process round trip.
type pipeBody struct {
	pr      *io.PipeReader
	cancel  context.CancelCauseFunc
	done    <-chan struct{}
	cleanup func()
	once    sync.Once
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

// Close ends the handler (a slow or stalled body stops) and waits for it.
func (b *pipeBody) Close() error {
	b.once.Do(func() {
		b.cancel(errBodyClosed)
		_ = b.pr.Close()
		<-b.done
		b.cleanup()
	})
	return nil
}
