package readrecovery

import (
	"context"
	"reflect"
	"time"
)

// Journal is the hook through which the transport keeps a durable record of a
// File batch run. *journal.Journal implements it; attach one to the requests
// of a run with [WithJournal].
//
// The transport calls, for every request whose context carries a Journal:
//
//  1. Admit before any network access (after any wait in the sequence's
//     window).
//  2. Begin just before the request is sent (the exclusive pending marker).
//     The context it gets ends with the caller's and at the sequence's
//     deadline: a wait for the journal's one in-flight slot must end with
//     it.
//  3. After the response or transport error, exactly one of:
//     Backoff for a 429 (the next immutable backoff entry, then the marker
//     cleared), returning the entry's event digest; or Complete for every
//     other outcome (a receipt for an acknowledged upload, then the marker
//     cleared). A request that Begin allowed but the sequence then refused
//     (it stopped while the request waited) is completed with a
//     TransportError that starts "not sent": its outcome is kept as
//     unknown, never as never-attempted.
//
// What an error from Admit or Begin means to the transport:
//
//   - wrapping [ErrReplayRefused]: this request is refused (an upload whose
//     outcome is on record); the sequence goes on ([StopReplayRefused]);
//   - wrapping the context's error while that context has ended: the
//     caller's context error is returned, or a total-exhausted stop when
//     the sequence's total ran out;
//   - a restriction (below) once the sequence's total has cut the
//     context off (the journal waited for another worker's request, or
//     for its store, past the total, and a read cut short left it
//     unresolved): a total-exhausted stop, not journal-restricted. Either
//     way the error matches [ErrSequenceStopped] (through azcore too:
//     see the azure module's Apply);
//   - having a JournalFull() method (found with errors.As, before the
//     next case): the journal's limits leave no room to record the
//     request; the sequence stops as journal-full (nothing failed to be
//     written);
//   - having a JournalRestricted() method (found with errors.As): the
//     run's status forbids network access; the sequence stops as
//     journal-restricted;
//   - anything else: from Admit, journal-restricted; from Begin, a
//     persistence failure. Nothing is sent.
//
// An error from Backoff is terminal before recovery: no wait, no re-send,
// the sequence stops (journal-full for an error with a JournalFull()
// method, else persistence-failed) and the original 429 goes back to the
// caller. An
// error from Complete after a 2xx mutation keeps the ACK (returned to the
// caller and in the report) and stops further requests.
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

// isNil reports whether v is nil or an interface holding a nil pointer, map,
// slice, function or channel.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}
