package readrecovery

import (
	"net/http"
	"sync/atomic"
)

// hostMemo is the default scope (schemeHost) of the scheme and host a
// table was last asked about: a Transport mostly talks to one host, and
// its scope is then the same string every time, not a new one per request
// (scenario 3: the one allocation per request that rr-shared made more
// than rr-budget). schemeHost reads nothing of a request but its URL's
// scheme and host, so equal ones have the same scope. Safe for concurrent
// use; the zero value remembers nothing.
type hostMemo struct {
	last atomic.Pointer[hostMemoEntry]
}

// hostMemoEntry is one scheme and host with its scope.
type hostMemoEntry struct {
	scheme, host, scope string
}

// scopeOf returns schemeHost(req), remembered when req's scheme and host
// are those of the last request asked about; else it is computed and
// remembered instead.
func (m *hostMemo) scopeOf(req *http.Request) string {
	u := req.URL
	if l := m.last.Load(); l != nil && l.scheme == u.Scheme && l.host == u.Host {
		return l.scope
	}
	s := schemeHost(req)
	m.last.Store(&hostMemoEntry{scheme: u.Scheme, host: u.Host, scope: s})
	return s
}
