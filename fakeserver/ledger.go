package fakeserver

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Request is one ledger entry: what the server saw and what it answered,
// in JSON as GET /_fakeserver/ledger serves it. Nothing secret is kept: no
// query value (a SAS "sig=" cannot leak), no header, no body (its digest).
type Request struct {
	// Seq is the 1-based arrival order across the server.
	Seq int `json:"seq"`
	// Ordinal is the 1-based arrival order within the route.
	Ordinal int `json:"ordinal"`
	// Method is the request method.
	Method string `json:"method"`
	// Route is the route name: "search.put", "file.list", ..., "other".
	Route string `json:"route"`
	// Path is the decoded request path.
	Path string `json:"path"`
	// QueryKeys are the distinct query parameter names, sorted; values are
	// dropped.
	QueryKeys []string `json:"query_keys,omitempty"`
	// Arrived is the server clock when the request arrived.
	Arrived time.Time `json:"arrived"`
	// RequestID is the x-ms-request-id answered: "" for a reset; in proxy
	// mode, for a forwarded request, the upstream's own x-ms-request-id (or
	// request-id, x-request-id, apim-request-id), "" when it sent none.
	RequestID string `json:"request_id"`
	// Status is the status answered; 0 for a reset, for a request its
	// client abandoned ([OutcomeAbandoned]), and while a proxied request
	// waits for its upstream.
	Status int `json:"status"`
	// Outcome is "" for a request answered (Status) or reset (Fault), and
	// [OutcomeAbandoned] for one whose client gave up before the answer: a
	// proxied request cancelled while it waited for its upstream, which the
	// fake never answered and which is no server error.
	Outcome string `json:"outcome,omitempty"`
	// Fault describes the injected fault ([Fault.String]), "" when none.
	Fault string `json:"fault,omitempty"`
	// Rule is the index in the script of the rule that fired; -1 when none.
	Rule int `json:"rule"`
	// BodyDigest is "sha256:" and the hex SHA-256 of the request body ("" if
	// the body could not be read whole).
	BodyDigest string `json:"body_digest"`
	// BodySize is the request body's length in bytes.
	BodySize int64 `json:"body_size"`
	// Decisions are what the rules by time or by rate ([Window],
	// [TokenBucket]) decided about the request, one per such rule that was
	// asked, in script order; nil when none was.
	Decisions []Decision `json:"decisions,omitempty"`
}

// OutcomeAbandoned is the [Request.Outcome] of a request its client
// abandoned before the answer.
const OutcomeAbandoned = "abandoned"

// Mutation reports whether the request's method is PUT, POST, PATCH or
// DELETE.
func (r Request) Mutation() bool {
	switch r.Method {
	case "PUT", "POST", "PATCH", "DELETE":
		return true
	}
	return false
}

// queryKeys returns the sorted distinct names of a raw query string.
func queryKeys(raw string) []string {
	var keys []string // nil for none
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, _, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Requests returns a copy of the ledger in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.ledger))
	for i, r := range s.ledger {
		out[i] = r.clone()
	}
	return out
}

// clone is r with its own slices.
func (r Request) clone() Request {
	r.QueryKeys = slices.Clone(r.QueryKeys)
	r.Decisions = cloneDecisions(r.Decisions)
	return r
}

// Count returns how many requests of route with method the server saw.
// An empty route or "*" counts every route; an empty method every method.
func (s *Server) Count(route, method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.ledger {
		if (route == "" || route == RouteAny || r.Route == route) && (method == "" || strings.EqualFold(r.Method, method)) {
			n++
		}
	}
	return n
}

// TB is the part of testing.TB the assertions use, so that this package
// does not import testing. *testing.T, *testing.B and *testing.F satisfy it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// AssertOption relaxes an assertion.
type AssertOption func(*assertConfig)

type assertConfig struct {
	resends map[string]int
}

// AllowResend lets each distinct mutation of route be sent n extra times,
// such as AllowResend("file.upload", 1) for the queue-429 route's single
// re-send.
func AllowResend(route string, n int) AssertOption {
	return func(c *assertConfig) {
		if c.resends == nil {
			c.resends = map[string]int{}
		}
		c.resends[route] = n
	}
}

// AssertNoMutationSentTwice reports an error through t for every mutation
// (PUT, POST, PATCH, DELETE) that the server saw more than once with the
// same method, path and body digest, beyond what [AllowResend] allows for
// its route. It returns whether the assertion held.
func (s *Server) AssertNoMutationSentTwice(t TB, opts ...AssertOption) bool {
	t.Helper()
	var cfg assertConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	type key struct{ method, path, digest string }
	seqs := map[key][]int{}
	var firsts []Request // each mutation's first sending, in order
	for _, r := range s.Requests() {
		k := key{r.Method, r.Path, r.BodyDigest}
		if !r.Mutation() {
			continue
		}
		if seqs[k] == nil {
			firsts = append(firsts, r)
		}
		seqs[k] = append(seqs[k], r.Seq)
	}
	ok := true
	for _, r := range firsts {
		sent := seqs[key{r.Method, r.Path, r.BodyDigest}]
		if n, allowed := len(sent), 1+cfg.resends[r.Route]; n > allowed {
			t.Errorf("fakeserver: mutation %s %q (%s, body %s) sent %d times, at most %d allowed: requests %v",
				r.Method, r.Path, r.Route, r.BodyDigest, n, allowed, sent)
			ok = false
		}
	}
	return ok
}

// Gap returns how long after the n-th request of route (1-based; "*" for
// arrival order across routes) the next request, of any route, arrived; an
// error when there is no n-th request or none after it.
func (s *Server) Gap(route string, n int) (time.Duration, error) {
	_, gap, err := s.gap(route, n)
	return gap, err
}

func (s *Server) gap(route string, n int) (Request, time.Duration, error) {
	reqs := s.Requests()
	for i, r := range reqs {
		if (route == RouteAny && r.Seq == n) || (r.Route == route && r.Ordinal == n) {
			if i+1 >= len(reqs) {
				return r, 0, fmt.Errorf("fakeserver: no request arrived after %s #%d", route, n)
			}
			return r, reqs[i+1].Arrived.Sub(r.Arrived), nil
		}
	}
	return Request{}, 0, fmt.Errorf("fakeserver: no request %s #%d in the ledger (%d requests)", route, n, len(reqs))
}

// AssertGap checks that the n-th request of route (as for [Server.Gap])
// was answered 429 and that the next request, of any route (after a write
// 429 on "search.put", the readback "search.get"), arrived at least d
// after it. It reports through t and returns whether the assertion held.
func (s *Server) AssertGap(t TB, route string, n int, d time.Duration) bool {
	t.Helper()
	r, gap, err := s.gap(route, n)
	if err != nil {
		t.Errorf("%v", err)
		return false
	}
	if r.Status != 429 {
		t.Errorf("fakeserver: %s #%d (request %d) was answered %d, not 429", route, n, r.Seq, r.Status)
		return false
	}
	if gap < d {
		t.Errorf("fakeserver: the request after %s #%d (request %d, 429) came %v after it, want at least %v", route, n, r.Seq, gap, d)
		return false
	}
	return true
}

// AdminPrefix starts the path of the fake's own routes, which are not Azure
// traffic:
//
//	GET /_fakeserver/health  200 {"status":"ok","requests":N}, N the ledger's length
//	GET /_fakeserver/ledger  200 {"requests":[...]}, the ledger ([Server.Requests]) as JSON
//
// (HEAD too; another method is a 405, another path a 404). They are
// answered by the fake itself, in proxy mode too, and are never in the
// ledger, shown to the observer or matched against the script, so a
// readiness probe uses up no rule's count. No Azure container name starts
// with "_".
const AdminPrefix = "/_fakeserver/"

// isAdmin reports whether p is an admin path: /_fakeserver or below it.
func isAdmin(p string) bool {
	return p == strings.TrimSuffix(AdminPrefix, "/") || strings.HasPrefix(p, AdminPrefix)
}

// ledgerBody is the JSON of GET /_fakeserver/ledger.
type ledgerBody struct {
	Requests []Request `json:"requests"`
}

// serveAdmin answers a request under AdminPrefix.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	var resp *response
	switch r.URL.Path {
	case AdminPrefix + "health", AdminPrefix + "ledger":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			resp = jsonError(http.StatusMethodNotAllowed, "MethodNotAllowed",
				"The method "+sanitizeMethod(r.Method)+" is not allowed on this resource.")
			resp.header.Set("Allow", "GET, HEAD")
			break
		}
		reqs := s.Requests()
		if r.URL.Path == AdminPrefix+"health" {
			resp = jsonResponse(http.StatusOK, struct {
				Status   string `json:"status"`
				Requests int    `json:"requests"`
			}{"ok", len(reqs)})
		} else {
			resp = jsonResponse(http.StatusOK, ledgerBody{Requests: reqs})
		}
	default:
		resp = jsonError(http.StatusNotFound, "ResourceNotFound",
			"No such fakeserver route: want "+AdminPrefix+"health or "+AdminPrefix+"ledger.")
	}
	resp.header.Set("Cache-Control", "no-store")
	resp.header.Set("Date", s.now().UTC().Format(http.TimeFormat))
	s.emit(r.Context(), w, r, resp, Fault{})
}
