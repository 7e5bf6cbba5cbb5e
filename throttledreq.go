package readrecovery

import (
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// throttledRequests remembers, per Transport, the mutation request objects
// that met 429 outside a sequence (no Budget): the same *http.Request
// handed to the transport again (a caller's loop, go-retryablehttp
// rewinding GetBody) is refused before the network (docs/policy.md:
// repeat-guard). It holds the requests weakly: an entry goes when the
// garbage collector frees its request, so it costs nothing once the caller
// drops the request. Within a sequence the Budget's repeat keys do this,
// and more.
type throttledRequests struct {
	n atomic.Int64 // entries: the lookup is one atomic load while there are none
	m sync.Map     // weak.Pointer[http.Request] -> throttledBy
}

// throttledBy is the 429 a remembered request met.
type throttledBy struct {
	status    int
	requestID string // sanitized
}

// add remembers req, which met the 429 status with request ID id.
func (t *throttledRequests) add(req *http.Request, status int, id string) {
	k := weak.Make(req)
	if _, loaded := t.m.LoadOrStore(k, throttledBy{status, id}); loaded {
		return
	}
	t.n.Add(1)
	runtime.AddCleanup(req, func(k weak.Pointer[http.Request]) {
		t.m.Delete(k)
		t.n.Add(-1)
	}, k)
}

// lookup returns the 429 req met, if it is a remembered request.
func (t *throttledRequests) lookup(req *http.Request) (throttledBy, bool) {
	if t.n.Load() == 0 {
		return throttledBy{}, false
	}
	v, ok := t.m.Load(weak.Make(req))
	if !ok {
		return throttledBy{}, false
	}
	return v.(throttledBy), true
}

// len returns the number of remembered requests.
func (t *throttledRequests) len() int64 { return t.n.Load() }
