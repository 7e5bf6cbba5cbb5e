package readrecovery

import (
	"context"
	"time"
)

// Journal is the hook through which the transport keeps a durable record of a
// File batch run (SPEC R30–R40). *journal.Journal implements it; attach one to
// the requests of a run with [WithJournal].
//
// The transport calls, for every request whose context carries a Journal:
//
//  1. Admit before any network access. A non-nil error blocks the request
//     and stops its sequence (a run that is waiting or unresolved).
//  2. Begin just before the request is sent (the exclusive pending marker).
//     A non-nil error is a persistence failure: nothing is sent.
//  3. After the response or transport error, exactly one of:
//     Backoff for a 429 (the next immutable backoff entry, then the marker
//     cleared), returning the entry's event digest; or Complete for every
//     other outcome (a receipt for an acknowledged upload, then the marker
//     cleared).
//
// An error from Backoff is terminal before recovery (R38): no wait, no
// re-send, the sequence stops and the original 429 goes back to the caller.
// An error from Complete after a 2xx mutation keeps the ACK (returned to the
// caller and in the report) and stops further requests (R39).
//
// Implementations must be safe for concurrent use.
type Journal interface {
	Admit(ctx context.Context, now time.Time) error
	Begin(ctx context.Context, req JournalRequest) error
	Complete(ctx context.Context, req JournalRequest, out JournalOutcome) error
	Backoff(ctx context.Context, req JournalRequest, out JournalOutcome, ra RetryAfter, timing *RetryAfterTiming) (eventDigest string, err error)
}

// JournalRequest describes a journaled request without anything secret: the
// URL appears only as a digest of its scheme, host and path (never its query
// or userinfo).
type JournalRequest struct {
	// Method is the HTTP method.
	Method string
	// URLDigest is "sha256:" and the hex SHA-256 of the redacted URL
	// (scheme://host/path).
	URLDigest string
	// Attempt is 1 for the first send and 2 for the one queue-429 re-send.
	Attempt int
	// ResendOf is the event digest of the backoff entry that allowed this
	// re-send; empty on attempt 1.
	ResendOf string
}

// JournalOutcome is what a journaled request met.
type JournalOutcome struct {
	// StatusCode is the response status, or 0 when the request failed
	// without a response (outcome unknown).
	StatusCode int
	// RequestID is the sanitized request ID of the response, if any.
	RequestID string
	// ETag is the response's ETag, if any.
	ETag string
	// TransportError is a sanitized description of a transport failure.
	TransportError string
}

// WithJournal returns a copy of ctx whose requests are journaled in j. A nil
// j returns ctx unchanged.
func WithJournal(ctx context.Context, j Journal) context.Context {
	if j == nil {
		return ctx
	}
	s := stateFrom(ctx).clone()
	s.journal = j
	return context.WithValue(ctx, stateKey{}, s)
}
