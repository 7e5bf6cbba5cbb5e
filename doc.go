// Package readrecovery makes HTTP 429 recovery safe for Azure clients: an
// http.RoundTripper decorator that recovers from 429 on reads, and only
// there, within hard bounds.
//
// The policy, for the requests of one sequence (a [Budget] in the context):
//
//   - One wait window per sequence, never per page or per request. A
//     request without a Budget gets no recovery: its 429 passes through.
//   - Only GET is re-sent, once, after the server-directed wait. A
//     mutation's 429 goes back untouched and its Retry-After holds the
//     sequence's other requests: wait before readback. A File upload marked
//     with [WithQueueRetry] that has GetBody is the one exception: re-sent
//     once, unchanged. A mutation that repeats one that met 429 in the
//     sequence (azcore's own retry of it) is refused before the network.
//   - The 429 body is closed unread before the wait; if that fails there is
//     no wait and no re-send. A 429 that is not recovered goes back
//     untouched, body open, for the caller's own error handling.
//   - Waits are never shorter than asked and honour the request context. A
//     delay above 30 s ([MaxServerWait]) or above what remains of the 60 s
//     total stops the sequence instead of being shortened. Retry-After is
//     parsed strictly by [ParseRetryAfter]; an oversized field fails
//     closed; a missing, malformed or duplicated one waits a diagnosed 1 s.
//   - A stopped sequence fails every further request before any network
//     access with an error matching [ErrSequenceStopped], which azcore's
//     retry policy does not retry (NonRetriable).
//   - Redirects are never followed: [NewClient] returns them, and a request
//     an http.Client made by following one is refused.
//   - Every wait is a "readrecovery.wait" span, every stop a span event
//     (on a span of its own when the request has none) and a field of
//     [Budget.Report]; [WithLogger] logs both. Nothing secret (credentials,
//     query strings, bodies) leaves the transport.
//
// # Concurrent requests: the window
//
// Azure clients send the requests of one sequence in parallel (azblob
// downloads the ranges of a blob at once). The sequence's one opportunity
// to wait is therefore a window in time, decided under the Budget's lock:
//
//   - It opens at the sequence's first decision to wait: a GET or marked
//     upload whose 429 it will re-send, or a mutation whose 429 delay it
//     keeps. It ends at the server's not-before time T.
//   - Every request of the sequence admitted before T waits until T, each
//     in its own wait span: pages, readbacks, mutations.
//   - A 429 of a request that was already in flight when the window opened
//     joins it: the request is re-sent once, no earlier than T and its own
//     not-before. A later not-before moves T out for every request not yet
//     sent, within the wait ceiling and the total; otherwise the sequence
//     stops.
//   - A 429 of a request sent while the sequence had a window (waiting in
//     it, or after T) stops the sequence: its opportunity is used. A 429 of
//     a re-sent request stops it too (persistent 429).
//   - A stop wakes every request waiting in the window at once, with the
//     stop error, before any network access. A re-send refused that way
//     carries its own 429's status and request ID.
//   - The request limit counts requests handed to the network, held
//     exactly however many run at once; a request refused before the
//     network is not counted.
//
// # Choices where the policy needs one
//
//   - HEAD, OPTIONS and TRACE pass through: their 429 is returned untouched
//     and opens no window. Every method other than these and GET is a
//     mutation (PUT, POST, PATCH, DELETE, and also MERGE, CONNECT or an
//     extension method the package does not know): never re-sent, its 429
//     delay held for the sequence.
//   - A queue-marked upload without GetBody is treated as any other
//     mutation: untouched, its delay held for the sequence.
//   - A request waiting in the window whose own context ends returns the
//     context's error and leaves the sequence running; a request waiting to
//     be re-sent after its own 429 stops the sequence (wait-canceled).
//   - The repeat guard knows a mutation by its method, URL and
//     x-ms-client-request-id, or without that ID by its body object (azcore
//     sends the same body again on its own tries); a mutation without a
//     body by its method and URL. Refusing it does not stop the sequence:
//     the error matches [ErrRequestRefused], not [ErrSequenceStopped].
//   - The total is enforced through the context [WithBudget] returns: it
//     ends when the total runs out. A context detached from it (for example
//     with context.WithoutCancel) keeps the Budget but not the cut-off.
//   - net/http's Transport itself re-sends a GET when a reused keep-alive
//     connection fails before any response; such a replay happens beneath
//     the policy and is not counted.
//   - A recovered 429 costs a new HTTP/1.1 connection: its body is closed
//     unread, and net/http does not reuse a connection whose body was not
//     read. HTTP/2 streams are unaffected.
//   - Ownership is per mutation request: owned when one of its attempts
//     got a 2xx; observed when a later successful read of the sequence
//     found something; unproven otherwise. The report's Ownership sums them
//     up: owned only when every mutation was acknowledged.
//   - A read's request ID and ETag are kept in the Budget as the server
//     sent them, at most 128 bytes each (a longer one is digested at once),
//     and sanitized when [Budget.Report] hands them out: reads whose report
//     nobody asks for do not pay for the sanitizing.
//   - The zero [Transport] and the zero [Budget] are usable; see their
//     documentation.
//
// Example:
//
//	client := readrecovery.NewClient()
//	b := readrecovery.NewBudget("inventory")
//	ctx := readrecovery.WithBudget(ctx, b)
//	for url := first; url != ""; url = next(page) {
//		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
//		resp, err := client.Do(req) // every page shares b's one window
//		...
//	}
//	report := b.Report()
package readrecovery
