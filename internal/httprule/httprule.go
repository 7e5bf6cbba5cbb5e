// Package httprule is the one home of the HTTP facts the module decides on
// in more than one place: which methods change server state, which statuses
// acknowledge a request and which throttle it. The transport, the journal
// and the Azure adapter ask here, so that a request is never a mutation in
// one of them and a read in another (docs/policy.md, "get-only-resend" and
// "ownership-needs-ack").
//
// How an ETag is made safe to keep is a redaction rule, not an HTTP one: it
// lives beside the other sanitizers, in internal/redact (redact.ETag).
package httprule

import "net/http"

// IsMutation reports whether a request with this method may change server
// state, and so must never be re-sent by recovery (except the queue-429
// route) nor by an SDK retry policy above the transport.
//
// Every method is a mutation except the safe methods of RFC 9110 section
// 9.2.1: GET, HEAD, OPTIONS and TRACE. The empty method is GET, as net/http
// reads it. The list is closed on the safe side on purpose: a method the
// module does not know is treated as one that writes, so its 429 is never
// retried blindly. That decides the two methods the older definitions
// disagreed on:
//
//   - MERGE (Azure Table storage's Merge Entity, an extension method) is a
//     mutation: it changes an entity.
//   - CONNECT is a mutation: RFC 9110 does not count it as safe, and a
//     tunnel's 429 is nothing the transport could replay.
//
// Methods are case-sensitive (RFC 9110 section 9.1): "get" is not GET and
// is therefore a mutation.
func IsMutation(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// IsSuccess reports whether status is a 2xx: for a mutation, the ACK that
// proves the server took it; for a read, a successful read.
func IsSuccess(status int) bool {
	return status >= 200 && status <= 299
}

// IsThrottled reports whether status is 429 Too Many Requests (RFC 6585
// section 4), the one status the policy recovers from. 503 with a
// Retry-After is not throttling here: it keeps the caller's own policy.
func IsThrottled(status int) bool {
	return status == http.StatusTooManyRequests
}
