package readrecovery

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// The repeat guard (docs/policy.md: repeat-guard): one table per Transport
// that answers "did this throttled mutation already meet 429?" for every
// identity a try of one operation can carry. A mutation's 429 enters it
// under each identity the request has; every later mutation is looked up
// under each of its own before the policy sees it. Reads are never
// entered and never looked up.
//
// The identities (guardKind):
//   - the operation mark of WithOperation (every try of one operation);
//   - the x-ms-client-request-id with method and URL (azcore keeps it
//     across its own tries);
//   - the request object and every copy net/http makes of it: http.Client
//     hands the transport a shallow copy when the client has a Timeout,
//     when the request's Header is nil, or when its URL has userinfo; a
//     shallow copy keeps the request's *url.URL, so the request object is
//     known by that pointer (held weakly), with its method and URL;
//   - within a sequence (its Budget, held weakly), the same method, URL
//     and body bytes: the body's SHA-256, read through GetBody only after a
//     mutation's 429 and only when a new mutation of the same method and
//     URL needs telling apart from it; two mutations without a body are
//     the same.
//
// Memory: the table holds at most guardEntries identities, in a ring: the
// oldest goes when a new one comes (a throttled mutation takes one to five
// identities, so at least guardEntries/5 throttled mutations are
// remembered, about 200 bytes each beside the strings of its method, URL
// and client request ID). Nothing is entered while no mutation meets 429,
// and a lookup is one atomic load while the table is empty.
const guardEntries = 2048

// bodyCloseWait is how long a new mutation waits at most for the base
// transport to close the body of a throttled mutation before the guard
// reads that body through GetBody (azcore's GetBody hands back the very
// stream being sent, so it is never read while net/http may still be
// sending it). A base that never closes request bodies (http.RoundTripper
// says it must) costs a later mutation of the same URL this wait at most,
// however many throttled bodies it waits for; the new mutation is then told
// apart from those without their bytes.
const bodyCloseWait = time.Second

// guardKind is which identity of a mutation a key names.
type guardKind uint8

const (
	guardOperation guardKind = iota + 1 // WithOperation's mark
	guardClientID                       // x-ms-client-request-id, method, URL
	guardRequest                        // the request object and its net/http copies
	guardBytes                          // within a sequence: method, URL, body digest
	guardURL                            // within a sequence: a mutation of method and URL met 429 (no refusal of its own)
)

// The details of the guard's refusals, one per identity.
const (
	detailOperation   = "a mutation of this operation already met 429; its later tries are never sent"
	detailClientID    = "a mutation with this x-ms-client-request-id, method and URL already met 429; it is never sent again"
	detailSameRequest = "this mutation request already met 429; the same request is never sent again"
	detailRepeat      = "this mutation already met 429 in the sequence; it is never sent again"
)

func (k guardKind) detail() string {
	switch k {
	case guardOperation:
		return detailOperation
	case guardClientID:
		return detailClientID
	case guardRequest:
		return detailSameRequest
	}
	return detailRepeat
}

// guardKey is one identity of a throttled mutation.
type guardKey struct {
	kind   guardKind
	op     *operation            // guardOperation
	url    weak.Pointer[url.URL] // guardRequest
	seq    weak.Pointer[Budget]  // guardBytes, guardURL
	method string                // all but guardOperation
	target string                // the URL without userinfo; all but guardOperation
	id     string                // the client request ID (guardClientID) or body digest (guardBytes)
}

// noBodyDigest is the digest of a mutation without a body.
const noBodyDigest = "\x00no body"

// guardSlot is one entry of the ring.
type guardSlot struct {
	key guardKey
	by  throttledBy
	// clientID: the throttled mutation's x-ms-client-request-id
	// (guardBytes): two mutations whose IDs differ are two operations,
	// whatever their bytes.
	clientID string
	// lazy is a throttled body whose digest is still to be taken
	// (guardURL): its key becomes a guardBytes one once it is.
	lazy *lazyBody
}

// throttledBy is the 429 a throttled mutation met: what a refusal carries.
type throttledBy struct {
	status    int
	requestID string // sanitized
}

// lazyBody is a throttled mutation's body, to be read only when needed.
type lazyBody struct {
	getBody  func() (io.ReadCloser, error)
	sent     <-chan struct{} // closed once the base is done with the body; nil: never sent wrapped
	clientID string
}

// repeatGuard is the Transport's one table of throttled mutations.
type repeatGuard struct {
	n     atomic.Int32 // slots in use: a lookup skips the lock while 0
	mu    sync.Mutex
	index map[guardKey]int // key -> its slot in ring
	ring  []guardSlot      // grows to guardEntries, then wraps at next
	next  int
}

// mutationID is what the guard knows of one mutation request: its
// identities, made once per request.
type mutationID struct {
	b        *Budget // nil outside a sequence
	op       *operation
	u        *url.URL
	method   string
	target   string
	clientID string
	req      *http.Request
}

// newMutationID gathers a mutation request's identities.
func newMutationID(req *http.Request, s *ctxState) mutationID {
	m := mutationID{req: req, u: req.URL, method: methodOf(req), target: targetOf(req.URL), clientID: clientRequestID(req.Header)}
	if s != nil {
		m.b, m.op = s.budget, s.op
	}
	return m
}

// targetOf returns u without userinfo, as a string.
func targetOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User != nil {
		c := *u
		c.User = nil
		return c.String()
	}
	return u.String()
}

// enter records that m met the 429 by. sent, with getBody, is the body the
// base was handed (closed once it is done with it).
func (g *repeatGuard) enter(m mutationID, by throttledBy, sent <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.op != nil {
		g.putLocked(guardSlot{key: guardKey{kind: guardOperation, op: m.op}, by: by})
	}
	if m.u != nil {
		g.putLocked(guardSlot{key: guardKey{kind: guardRequest, url: weak.Make(m.u), method: m.method, target: m.target}, by: by})
	}
	if m.clientID != "" {
		g.putLocked(guardSlot{key: guardKey{kind: guardClientID, method: m.method, target: m.target, id: m.clientID}, by: by})
	}
	if m.b == nil {
		return
	}
	seq := weak.Make(m.b)
	urlKey := guardKey{kind: guardURL, seq: seq, method: m.method, target: m.target}
	switch body := m.req.Body; {
	case body == nil || body == http.NoBody:
		g.putLocked(guardSlot{key: guardKey{kind: guardBytes, seq: seq, method: m.method, target: m.target, id: noBodyDigest}, by: by, clientID: m.clientID})
		g.putLocked(guardSlot{key: urlKey, by: by})
	case m.req.GetBody != nil:
		g.putLocked(guardSlot{key: urlKey, by: by, lazy: &lazyBody{getBody: m.req.GetBody, sent: sent, clientID: m.clientID}})
	}
}

// putLocked stores one slot, replacing the oldest when the ring is full.
// A key entered twice keeps its first 429 (the evidence of the first
// refusal), except that a guardURL slot with a lazy body always gets one
// of its own.
func (g *repeatGuard) putLocked(sl guardSlot) {
	if g.index == nil {
		g.index = make(map[guardKey]int)
	}
	if i, ok := g.index[sl.key]; ok && sl.lazy == nil {
		if e := &g.ring[i]; e.clientID != sl.clientID {
			e.clientID = "" // several IDs: the bytes alone decide
		}
		return
	}
	var i int
	if len(g.ring) < guardEntries {
		g.ring = append(g.ring, sl)
		i = len(g.ring) - 1
		g.n.Add(1)
	} else {
		i = g.next
		g.next = (g.next + 1) % guardEntries
		if old := g.ring[i].key; g.index[old] == i {
			delete(g.index, old)
		}
		g.ring[i] = sl
	}
	g.index[sl.key] = i
}

// lookup returns the 429 a throttled mutation met when m repeats it, and
// which identity told. ctx bounds the wait for a throttled body's close.
func (g *repeatGuard) lookup(ctx context.Context, m mutationID) (throttledBy, guardKind, bool) {
	if g.n.Load() == 0 {
		return throttledBy{}, 0, false
	}
	if by, kind, ok := g.lookupIdentity(m); ok || m.b == nil {
		return by, kind, ok
	}
	seq := weak.Make(m.b)
	if !g.digestThrottled(ctx, m, seq) {
		return throttledBy{}, 0, false // no throttled mutation of this method and URL: no body is read
	}
	var digest string
	switch body := m.req.Body; {
	case body == nil || body == http.NoBody:
		digest = noBodyDigest
	case m.req.GetBody != nil:
		digest = bodyDigest(m.req.GetBody)
	}
	if digest == "" {
		return throttledBy{}, 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i, ok := g.index[guardKey{kind: guardBytes, seq: seq, method: m.method, target: m.target, id: digest}]
	if !ok {
		return throttledBy{}, 0, false
	}
	sl := g.ring[i]
	if m.clientID != "" && sl.clientID != "" && m.clientID != sl.clientID {
		return throttledBy{}, 0, false // two operations with the same bytes
	}
	return sl.by, guardBytes, true
}

// lookupIdentity looks m up by its identities but its bytes: the
// operation mark, the request object, the client request ID.
func (g *repeatGuard) lookupIdentity(m mutationID) (throttledBy, guardKind, bool) {
	keys := [3]guardKey{}
	n := 0
	if m.op != nil {
		keys[n] = guardKey{kind: guardOperation, op: m.op}
		n++
	}
	if m.u != nil {
		keys[n] = guardKey{kind: guardRequest, url: weak.Make(m.u), method: m.method, target: m.target}
		n++
	}
	if m.clientID != "" {
		keys[n] = guardKey{kind: guardClientID, method: m.method, target: m.target, id: m.clientID}
		n++
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range keys[:n] {
		if i, ok := g.index[k]; ok {
			return g.ring[i].by, k.kind, true
		}
	}
	return throttledBy{}, 0, false
}

// digestThrottled takes, outside the lock, the digests still to be taken
// of the throttled bodies of m's sequence, method and URL (each once the
// base is done with it, all within one bodyCloseWait). It reports whether
// the sequence has a throttled mutation of that method and URL at all.
func (g *repeatGuard) digestThrottled(ctx context.Context, m mutationID, seq weak.Pointer[Budget]) bool {
	type todo struct {
		i    int
		lazy *lazyBody
	}
	var todos []todo
	g.mu.Lock()
	if _, ok := g.index[guardKey{kind: guardURL, seq: seq, method: m.method, target: m.target}]; !ok {
		g.mu.Unlock()
		return false
	}
	for i := range g.ring {
		sl := &g.ring[i]
		if sl.lazy != nil && sl.key.kind == guardURL && sl.key.seq == seq && sl.key.method == m.method && sl.key.target == m.target {
			todos = append(todos, todo{i, sl.lazy})
		}
	}
	g.mu.Unlock()
	deadline := time.Now().Add(bodyCloseWait) // one bound for all of them
	for _, t := range todos {
		if !closedBy(ctx, t.lazy.sent, deadline) {
			continue // the base still holds the body: told apart without its bytes
		}
		d := bodyDigest(t.lazy.getBody)
		g.mu.Lock()
		if sl := &g.ring[t.i]; sl.lazy == t.lazy {
			sl.lazy = nil
			if d != "" {
				g.putLocked(guardSlot{key: guardKey{kind: guardBytes, seq: seq, method: m.method, target: m.target, id: d}, by: sl.by, clientID: t.lazy.clientID})
			}
		}
		g.mu.Unlock()
	}
	return true
}

// closedBy waits for sent to close, until deadline and while ctx lasts;
// true when it closed (or there is nothing to wait for).
func closedBy(ctx context.Context, sent <-chan struct{}, deadline time.Time) bool {
	if sent == nil {
		return true
	}
	select {
	case <-sent:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-sent:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// len returns the number of identities held.
func (g *repeatGuard) len() int { return int(g.n.Load()) }

// refuse refuses, before network access, a mutation that repeats one
// that met 429, or any later try of an operation whose mutation met 429:
// its error carries that 429's status and request ID and does not stop the
// sequence.
func (g *repeatGuard) refuse(req *http.Request, s *ctxState, mutation bool) error {
	if g.n.Load() == 0 || (!mutation && (s == nil || s.op == nil)) {
		return nil
	}
	var m mutationID
	if mutation {
		m = newMutationID(req, s)
	} else {
		m.op = s.op // a read: a try of its operation only
	}
	by, kind, ok := g.lookup(req.Context(), m)
	if !ok {
		return nil
	}
	closeRequestBody(req)
	seq := ""
	if m.b != nil {
		seq = m.b.Name()
	}
	return &StopError{Sequence: seq, Reason: StopRepeatRefused, Detail: kind.detail(), StatusCode: by.status, RequestID: by.requestID}
}

// bodyDigest returns the SHA-256 of the body GetBody produces, "" when it
// fails. Some GetBody functions (azcore's) hand back the very stream the
// request sends, seeked to its start, rather than a copy: GetBody is
// called once more to rewind such a stream, and only readers of its own
// (a second call gave another object) are closed.
func bodyDigest(getBody func() (io.ReadCloser, error)) string {
	r, err := getBody()
	if err != nil || r == nil {
		return ""
	}
	h := sha256.New()
	_, err = io.Copy(h, r)
	again, err2 := getBody()
	if err2 == nil && again != nil && !sameObject(r, again) {
		r.Close()
		again.Close()
	}
	if err != nil || err2 != nil {
		return ""
	}
	return string(h.Sum(nil))
}

// sameObject reports whether a and b are the same pointer, or equal
// comparable values; false for values that cannot be compared.
func sameObject(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// clientRequestID returns the x-ms-client-request-id of h, its key in any
// ASCII case; "" without one.
func clientRequestID(h http.Header) string {
	const name = "X-Ms-Client-Request-Id"
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(k) == len(name) && len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}

// sentBody tells when the base transport has closed a request's body
// (http.RoundTripper: RoundTrip closes it, maybe after it returned).
type sentBody struct {
	io.ReadCloser
	once sync.Once
	done chan struct{}
}

func (b *sentBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { close(b.done) })
	return err
}

// closed is closed once the body is; nil for a nil body.
func (b *sentBody) closed() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.done
}
