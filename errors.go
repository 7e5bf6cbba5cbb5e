package readrecovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors of the transport's own decisions. Both are wrapped, never returned
// bare: test for them with errors.Is.
var (
	// ErrSequenceStopped is the error of every request of a sequence that
	// has stopped (docs/policy.md: stopped-stays-stopped), and of the
	// request whose outcome stopped it when the transport returns an error
	// rather than the original response. The concrete error is a
	// *StopError that says why.
	ErrSequenceStopped = errors.New("readrecovery: sequence stopped")

	// ErrRedirectRefused is returned for a request that an http.Client
	// produced by following a redirect (req.Response != nil): the transport
	// never sends it (same-request-no-redirects).
	ErrRedirectRefused = errors.New("readrecovery: request produced by a redirect refused")

	// ErrRequestRefused is the error of one request refused before any
	// network access while its sequence goes on: a mutation that repeats
	// one that already met 429, or a later try of an operation whose
	// mutation met 429 ([StopRepeatRefused]; it carries that 429's status
	// and request ID), or an upload whose outcome its journal already holds
	// ([StopReplayRefused]). The
	// concrete error is a *StopError; errors.Is(err, ErrSequenceStopped)
	// is false for it.
	ErrRequestRefused = errors.New("readrecovery: request refused")

	// ErrReplayRefused is what a [Journal] wraps when it refuses a request
	// because the upload it names already has its outcome on record (an
	// acknowledged file is never sent again). The transport refuses that
	// one request with [StopReplayRefused]; the sequence goes on.
	ErrReplayRefused = errors.New("readrecovery: upload outcome already recorded, not sent again")

	// ErrNilResponse is wrapped in the error of a request whose base
	// RoundTripper returned neither a response nor an error, which
	// net/http's Client reports as an error too: the transport passes it
	// on as a transport error, and the request's place in its scope comes
	// back like any other's.
	ErrNilResponse = errors.New("readrecovery: base RoundTripper returned a nil *Response with a nil error")
)

// StopReason says why a sequence stopped. The zero value means it has not.
type StopReason string

// The reasons a sequence stops (docs/policy.md: stopped-stays-stopped and the
// rules each reason names).
const (
	StopTotalExhausted    StopReason = "total-exhausted"        // the total time ran out
	StopRequestsExhausted StopReason = "requests-exhausted"     // the request limit was reached
	StopOpportunityUsed   StopReason = "opportunity-used"       // a 429 came after the sequence's one wait window
	StopPersistent429     StopReason = "persistent-429"         // the re-sent request met 429 again
	StopOverlong          StopReason = "overlong-retry-after"   // a valid delay above the wait ceiling
	StopOversized         StopReason = "oversized-retry-after"  // a Retry-After field over the size bound
	StopWaitExceedsTotal  StopReason = "wait-exceeds-remaining" // the delay is longer than what remains of the total
	StopCleanupFailed     StopReason = "cleanup-failed"         // closing the 429 body failed
	StopPersistenceFailed StopReason = "persistence-failed"     // the journal could not record the request or its 429
	StopReceiptFailed     StopReason = "receipt-failed"         // an acknowledged upload's receipt could not be written
	StopJournalRestricted StopReason = "journal-restricted"     // the journal's status forbids network access
	StopJournalFull       StopReason = "journal-full"           // the journal's limits (entries, files) leave no room to record the request
	StopWaitCanceled      StopReason = "wait-canceled"          // the request context ended while it waited to be re-sent after its own 429
	StopUnreplayableBody  StopReason = "unreplayable-body"      // the body of a request to re-send could not be read again
	StopRestricted        StopReason = "restricted"             // the scope's shared restriction ends beyond the wait ceiling or the total, or after the sequence's window

	// Reasons that refuse one request and leave the sequence running
	// (errors.Is(err, ErrRequestRefused), not ErrSequenceStopped).
	StopReplayRefused StopReason = "replay-refused" // the journal refused an upload whose outcome is on record
	StopRepeatRefused StopReason = "repeat-refused" // a mutation repeats one that already met 429 (repeat-guard)
)

// StopError is the error of a stopped sequence. errors.Is(err,
// ErrSequenceStopped) holds for it, and errors.Is also finds the cause in Err
// (a context error, a journal error). It carries nothing secret: the request
// ID is sanitized and the detail never holds a URL query, a header value or
// a body.
type StopError struct {
	// Sequence is the Budget's name ("" for a journal without a Budget).
	Sequence string
	// Reason says why the sequence stopped.
	Reason StopReason
	// Detail is a short sanitized diagnostic.
	Detail string
	// StatusCode is the status of the response that stopped the sequence
	// (for example 429 when closing its body failed), or 0.
	StatusCode int
	// RequestID is the sanitized request ID of that response, or "".
	RequestID string
	// Err is the underlying cause, or nil.
	Err error
}

// Error describes the stop, or the refusal for the reasons that refuse one
// request.
func (e *StopError) Error() string {
	if e == nil {
		return "readrecovery: <nil *StopError>"
	}
	var b strings.Builder
	if e.Reason.refusesOnlyRequest() {
		// A refusal: the sequence goes on.
		b.WriteString("readrecovery: request refused (sequence ")
		b.WriteString(strconv.Quote(e.Sequence))
		b.WriteString(" goes on): ")
	} else {
		b.WriteString("readrecovery: sequence ")
		b.WriteString(strconv.Quote(e.Sequence))
		b.WriteString(" stopped: ")
	}
	b.WriteString(string(e.Reason))
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (status %d", e.StatusCode)
		if e.RequestID != "" {
			b.WriteString(", request ID ")
			b.WriteString(e.RequestID)
		}
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is ErrSequenceStopped, or ErrRequestRefused
// for the reasons that refuse a single request.
func (e *StopError) Is(target error) bool {
	if e == nil {
		return false
	}
	switch target {
	case ErrSequenceStopped:
		return !e.Reason.refusesOnlyRequest()
	case ErrRequestRefused:
		return e.Reason.refusesOnlyRequest()
	}
	return false
}

// refusesOnlyRequest reports whether the reason refuses one request and
// leaves its sequence running.
func (r StopReason) refusesOnlyRequest() bool {
	return r == StopReplayRefused || r == StopRepeatRefused
}

// Unwrap returns the cause.
func (e *StopError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// NonRetriable marks the error for azcore's retry policy, which leaves an
// error with this method alone, so that a policy above the transport does
// not undo a stop (stops-are-nonretriable).
func (e *StopError) NonRetriable() {}

// refusedError is the error of a refused redirect-produced request.
type refusedError struct{ method, url string }

func (e *refusedError) Error() string {
	return ErrRedirectRefused.Error() + ": " + e.method + " " + e.url
}
func (e *refusedError) Unwrap() error { return ErrRedirectRefused }
func (e *refusedError) NonRetriable() {}
