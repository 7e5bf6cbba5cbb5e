// Package otelattr holds the OpenTelemetry names readrecovery emits: span
// and event names, attribute keys as exported constants, and small builders
// that turn a wait or a stop into attributes. It reuses the semantic-
// convention names where they exist (http.request.method,
// http.response.status_code, server.address, url.full, error.type) and
// invents names only under "readrecovery.".
package otelattr

import (
	"go.opentelemetry.io/otel/attribute"
)

// Span and event names.
const (
	// WaitSpanName names the span of one server-directed wait
	// (docs/policy.md, "every-wait-is-a-span").
	WaitSpanName = "readrecovery.wait"
	// StopEventName names the span event recorded when a sequence stops
	// (docs/policy.md, "stop-is-recorded"). With no recording span in the request's context, the
	// event goes on a short span of its own, named StopSpanName.
	StopEventName = "readrecovery.stop"
	// StopSpanName names the span that carries a stop event when the
	// request's context has no recording span (docs/policy.md,
	// "stop-is-recorded").
	StopSpanName = "readrecovery.stop"
	// WaitsMetric counts waits (attributes: readrecovery.wait.trigger,
	// readrecovery.wait.canceled).
	WaitsMetric = "readrecovery.waits"
	// StopsMetric counts stopped sequences (readrecovery.stop.reason).
	StopsMetric = "readrecovery.stops"
	// WaitDurationMetric is a histogram of wait seconds (as WaitsMetric).
	WaitDurationMetric = "readrecovery.wait.duration"
	// The per-scope instruments of a table of shared restrictions
	// (attribute: readrecovery.scope): gauges of the seconds until the
	// scope's not-before, its pace in requests per second, its room, its
	// requests in flight and queued, and a counter of its 429s.
	ScopeRestrictedMetric = "readrecovery.scope.restricted"
	ScopePaceMetric       = "readrecovery.scope.pace"
	ScopeRoomMetric       = "readrecovery.scope.room"
	ScopeInFlightMetric   = "readrecovery.scope.in_flight"
	ScopeQueuedMetric     = "readrecovery.scope.queued"
	ScopeThrottledMetric  = "readrecovery.scope.throttled"
	// ScopeStoreAgeMetric is a gauge of the seconds since the scope store
	// last answered an exchange of the scope (tables with a store only):
	// the age of the fleet's view the process paces by.
	ScopeStoreAgeMetric = "readrecovery.scope.store_age"
	// ScopeName is the instrumentation scope of the tracer and the meter.
	ScopeName = "github.com/readrecovery/readrecovery"
)

// Attribute keys. The semantic-convention keys are spelled as in the
// OpenTelemetry HTTP conventions.
const (
	HTTPRequestMethod      = attribute.Key("http.request.method")
	HTTPResponseStatusCode = attribute.Key("http.response.status_code")
	ServerAddress          = attribute.Key("server.address")
	ServerPort             = attribute.Key("server.port")
	URLFull                = attribute.Key("url.full")
	HTTPRequestResendCount = attribute.Key("http.request.resend_count")
	ErrorType              = attribute.Key("error.type")
	SequenceName           = attribute.Key("readrecovery.sequence.name")
	WaitTrigger            = attribute.Key("readrecovery.wait.trigger")
	RetryAfterKind         = attribute.Key("readrecovery.retry_after.kind")
	RetryAfterValue        = attribute.Key("readrecovery.retry_after.value")
	ServerDelaySeconds     = attribute.Key("readrecovery.retry_after.server_delay_seconds")
	WaitPlannedSeconds     = attribute.Key("readrecovery.wait.planned_seconds")
	RequestID              = attribute.Key("readrecovery.request_id")
	StopReason             = attribute.Key("readrecovery.stop.reason")
	WaitCanceled           = attribute.Key("readrecovery.wait.canceled")
	StopDetail             = attribute.Key("readrecovery.stop.detail")
	SequenceRequests       = attribute.Key("readrecovery.sequence.requests")
	JournalEventDigest     = attribute.Key("readrecovery.journal.event_digest")
	WaitCauseMethod        = attribute.Key("readrecovery.wait.cause_method")
	RetryAfterFloorMs      = attribute.Key("readrecovery.retry_after.floor_ms")
	Scope                  = attribute.Key("readrecovery.scope")
)

// Log record keys: those of the records WithLogger writes (a wait, a
// stop) and of Report.LogValue. They are plain slog keys, not attribute
// keys: logs keep the short names operators search for.
const (
	LogActualSeconds   = "actual_seconds"
	LogBurst           = "burst"
	LogEvent           = "event"
	LogNotBefore       = "not_before"
	LogRate            = "rate_per_second"
	LogRoom            = "room"
	LogScope           = "scope"
	LogCanceled        = "canceled"
	LogDetail          = "detail"
	LogFloorMs         = "floor_ms"
	LogJoined          = "joined"
	LogLengthSeconds   = "length_seconds"
	LogMethod          = "method"
	LogMutations       = "mutations"
	LogOwnership       = "ownership"
	LogPlannedSeconds  = "planned_seconds"
	LogReadsFailed     = "reads_failed"
	LogReadsOk         = "reads_ok"
	LogReason          = "reason"
	LogRequestID       = "request_id"
	LogRequests        = "requests"
	LogResend          = "resend"
	LogRetryAfterKind  = "retry_after_kind"
	LogRetryAfterValue = "retry_after_value"
	LogSequence        = "sequence"
	LogServerAddress   = "server_address"
	LogStatus          = "status"
	LogStop            = "stop"
	LogStopDetail      = "stop_detail"
	LogTrigger         = "trigger"
	LogURL             = "url"
	LogWaitSeconds     = "wait_seconds"
	LogWaits           = "waits"
	LogWindow          = "window"
)

// Wait triggers: what caused a wait.
const (
	TriggerWrite429 = "write-429" // a mutation met 429; the sequence's other requests wait first
	TriggerRead429  = "read-429"  // a GET met 429 and is re-sent once after the wait
	TriggerQueue429 = "queue-429" // a marked File upload met 429 and is re-sent once
	// TriggerSharedRestriction: another request of the Transport met 429 in
	// the same scope (WithSharedRestrictions); this one waits for its place.
	TriggerSharedRestriction = "shared-restriction"
	// TriggerScopeRoom: with shared restrictions, the request waited for
	// its scope's room (as many of the scope's requests in flight as the
	// server has shown it takes); no 429 caused it.
	TriggerScopeRoom = "scope-room"
)

// WaitInfo is what a wait span records. Every string must already be
// sanitized: URL without query or userinfo, request ID from the sanitizer.
type WaitInfo struct {
	Sequence           string
	Trigger            string
	RetryAfterKind     string
	RetryAfterValue    int64
	ServerDelaySeconds int64
	PlannedSeconds     float64
	// RequestID and StatusCode are those of the 429 that set the wait's
	// end; CauseMethod the method of its request when it is not Method
	// (a readback waiting after a PUT's 429).
	RequestID   string
	StatusCode  int
	CauseMethod string
	// Method is the method of the request that waits; Resend is true when
	// it waits to be sent again after its own 429.
	Method        string
	Resend        bool
	ServerAddress string // host name, without the port
	ServerPort    int    // 0: not recorded
	URL           string
	// FloorMs is an Azure millisecond floor (retry-after-ms) that made
	// the wait longer than Retry-After alone; 0: none.
	FloorMs int64
	// EventDigest is the journal entry that allowed a queue-429 re-send.
	EventDigest string
}

// Wait returns the attributes of a wait span: readrecovery.sequence.name,
// readrecovery.wait.trigger, readrecovery.retry_after.kind,
// readrecovery.retry_after.value, readrecovery.retry_after.server_delay_seconds,
// readrecovery.wait.planned_seconds, readrecovery.request_id,
// http.request.method, http.response.status_code, server.address and
// url.full; server.port when known; http.request.resend_count (1) for a
// re-send's wait; readrecovery.wait.cause_method when the 429 was another
// method's; readrecovery.retry_after.floor_ms when a floor applied;
// readrecovery.journal.event_digest when a journal entry allowed the
// re-send.
func Wait(w WaitInfo) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 16)
	kv = append(kv,
		SequenceName.String(w.Sequence),
		WaitTrigger.String(w.Trigger),
		RetryAfterKind.String(w.RetryAfterKind),
		RetryAfterValue.Int64(w.RetryAfterValue),
		ServerDelaySeconds.Int64(w.ServerDelaySeconds),
		WaitPlannedSeconds.Float64(w.PlannedSeconds),
		RequestID.String(w.RequestID),
		HTTPRequestMethod.String(w.Method),
		HTTPResponseStatusCode.Int(w.StatusCode),
		ServerAddress.String(w.ServerAddress),
		URLFull.String(w.URL),
	)
	if w.ServerPort > 0 {
		kv = append(kv, ServerPort.Int(w.ServerPort))
	}
	if w.Resend {
		kv = append(kv, HTTPRequestResendCount.Int(1))
	}
	if w.CauseMethod != "" && w.CauseMethod != w.Method {
		kv = append(kv, WaitCauseMethod.String(w.CauseMethod))
	}
	if w.FloorMs > 0 {
		kv = append(kv, RetryAfterFloorMs.Int64(w.FloorMs))
	}
	if w.EventDigest != "" {
		kv = append(kv, JournalEventDigest.String(w.EventDigest))
	}
	return kv
}

// Stop returns the attributes of a stop event: readrecovery.sequence.name,
// readrecovery.stop.reason, readrecovery.stop.detail and
// readrecovery.sequence.requests.
func Stop(sequence, reason, detail string, requests int) []attribute.KeyValue {
	return []attribute.KeyValue{
		SequenceName.String(sequence),
		StopReason.String(reason),
		StopDetail.String(detail),
		SequenceRequests.Int(requests),
	}
}
