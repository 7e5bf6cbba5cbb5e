// Package readrecovery makes HTTP 429 recovery safe for Azure clients: an
// http.RoundTripper decorator that recovers from 429 on reads, and only
// there, within hard bounds.
//
// The policy, for the requests of one sequence (a [Budget] in the context):
//
//   - One delay per sequence, never per page or per request (R1). A request
//     without a Budget gets no recovery: its 429 passes through (R5).
//   - Only GET is re-sent, once, after the server-directed wait (R7, R9). A
//     mutation's 429 goes back untouched and its Retry-After delays the next
//     GET of the sequence: wait before readback (R8). A File upload marked
//     with [WithQueueRetry] that has GetBody is the one exception: re-sent
//     once, unchanged (R10).
//   - The 429 body is closed unread before the wait; if that fails there is
//     no wait and no re-send (R12). A 429 that is not recovered goes back
//     untouched, body open, for the caller's own error handling (R13).
//   - Waits are never shorter than asked and honour the request context. A
//     delay above 30 s ([MaxServerWait]) or above what remains of the 60 s
//     total stops the sequence instead of being shortened (R14). Retry-After
//     is parsed strictly by [ParseRetryAfter]; an oversized field fails
//     closed; a missing, malformed or duplicated one waits a diagnosed 1 s.
//   - A stopped sequence fails every further request before any network
//     access with an error matching [ErrSequenceStopped] (R4), which azcore's
//     retry policy does not retry (NonRetriable, R16).
//   - Redirects are never followed: [NewClient] returns them, and a request
//     an http.Client made by following one is refused (R11).
//   - Every wait is a "readrecovery.wait" span; every stop a span event and
//     a field of [Budget.Report] (R24–R29). Nothing secret (credentials,
//     query strings, bodies) leaves the transport.
//
// Choices where the specification is silent:
//
//   - HEAD, OPTIONS and other methods that are neither GET nor a mutation
//     (PUT, POST, PATCH, DELETE) pass through: their 429 is returned
//     untouched, uses no opportunity and leaves no wait.
//   - A write 429's wait is taken by the next GET of the sequence only; a
//     GET sent after the delay already passed records a wait of zero.
//   - A queue-marked upload without GetBody is treated as any other
//     mutation: untouched, its delay kept for the next GET.
//   - A request whose context has a deadline or cancellation of its own
//     keeps it; the sequence's total is added on top.
//   - The request limit counts the requests the transport hands to its base.
//     net/http's Transport itself re-sends a GET when a reused keep-alive
//     connection fails before any response; such a replay happens beneath
//     the policy (R15) and is not counted.
//   - A recovered 429 costs a new connection: its body is closed unread
//     (R12), and net/http does not reuse a connection whose body was not
//     read.
//   - Azure's retry-after-ms and x-ms-retry-after-ms headers are not read:
//     only Retry-After directs a wait.
//
// Example:
//
//	client := readrecovery.NewClient()
//	b := readrecovery.NewBudget("inventory")
//	ctx := readrecovery.WithBudget(ctx, b)
//	for url := first; url != ""; url = next(page) {
//		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
//		resp, err := client.Do(req) // every page shares b's one delay
//		...
//	}
//	report := b.Report()
package readrecovery
