package readrecovery

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/otelattr"
)

// How a Report shows itself: one line for people (String), a group for
// structured logs (LogValue), and JSON whose durations are seconds. All
// three carry only what the Report holds, which is sanitized already.

// String returns the report in one line, for example:
//
//	sequence "index a": requests=2 waits=1 wait=3s window=write-429/3s stop=- mutations=1 ownership=observed reads ok=1 failed=0
func (r Report) String() string {
	var b strings.Builder
	b.WriteString("sequence ")
	b.WriteString(strconv.Quote(r.Sequence))
	b.WriteString(": requests=")
	b.WriteString(strconv.Itoa(r.Requests))
	b.WriteString(" waits=")
	b.WriteString(strconv.Itoa(r.Waits))
	b.WriteString(" wait=")
	b.WriteString(r.WaitTime.Round(time.Millisecond).String())
	if r.RoomWaits > 0 {
		b.WriteString(" room-waits=")
		b.WriteString(strconv.Itoa(r.RoomWaits))
		b.WriteString(" room-wait=")
		b.WriteString(r.RoomWaitTime.Round(time.Millisecond).String())
	}
	b.WriteString(" window=")
	if r.Window == nil {
		b.WriteString("-")
	} else {
		b.WriteString(r.Window.Trigger)
		b.WriteString("/")
		b.WriteString(r.Window.Length.Round(time.Millisecond).String())
	}
	b.WriteString(" stop=")
	if r.Stop == "" {
		b.WriteString("-")
	} else {
		b.WriteString(string(r.Stop))
	}
	if n := r.mutationRequests(); n > 0 {
		b.WriteString(" mutations=")
		b.WriteString(strconv.Itoa(n))
		b.WriteString(" ownership=")
		b.WriteString(string(r.Ownership))
	}
	b.WriteString(" reads ok=")
	b.WriteString(strconv.Itoa(len(r.SuccessfulReads) + r.DroppedSuccessfulReads))
	b.WriteString(" failed=")
	b.WriteString(strconv.Itoa(len(r.FailedReads) + r.DroppedFailedReads))
	return b.String()
}

// mutationRequests counts the mutation requests the report lists.
func (r Report) mutationRequests() int {
	n := 0
	for _, m := range r.Mutations {
		n = max(n, m.Request)
	}
	return n
}

// LogValue logs the report as a group: sequence, requests, waits,
// wait_seconds, window, stop, stop_detail, mutations, ownership, reads_ok
// and reads_failed.
func (r Report) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String(otelattr.LogSequence, r.Sequence),
		slog.Int(otelattr.LogRequests, r.Requests),
		slog.Int(otelattr.LogWaits, r.Waits),
		slog.Float64(otelattr.LogWaitSeconds, r.WaitTime.Seconds()),
	}
	if r.Window != nil {
		attrs = append(attrs, slog.Group(otelattr.LogWindow,
			slog.String(otelattr.LogTrigger, r.Window.Trigger),
			slog.Float64(otelattr.LogLengthSeconds, r.Window.Length.Seconds()),
			slog.Int(otelattr.LogJoined, r.Window.Joined)))
	}
	if r.Stop != "" {
		attrs = append(attrs, slog.String(otelattr.LogStop, string(r.Stop)), slog.String(otelattr.LogStopDetail, r.StopDetail))
	}
	if n := r.mutationRequests(); n > 0 {
		attrs = append(attrs, slog.Int(otelattr.LogMutations, n), slog.String(otelattr.LogOwnership, string(r.Ownership)))
	}
	attrs = append(attrs,
		slog.Int(otelattr.LogReadsOk, len(r.SuccessfulReads)+r.DroppedSuccessfulReads),
		slog.Int(otelattr.LogReadsFailed, len(r.FailedReads)+r.DroppedFailedReads))
	return slog.GroupValue(attrs...)
}

// MarshalJSON writes the report with its wait time in seconds
// ("wait_seconds").
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		WaitSeconds float64 `json:"wait_seconds"`
	}{plain(r), r.WaitTime.Seconds()})
}

// MarshalJSON writes the wait with its lengths in seconds
// ("planned_seconds", "actual_seconds").
func (w WaitRecord) MarshalJSON() ([]byte, error) {
	type plain WaitRecord
	return json.Marshal(struct {
		plain
		PlannedSeconds float64 `json:"planned_seconds"`
		ActualSeconds  float64 `json:"actual_seconds"`
	}{plain(w), w.Planned.Seconds(), w.Actual.Seconds()})
}

// MarshalJSON writes the window with its length in seconds
// ("length_seconds").
func (w WindowRecord) MarshalJSON() ([]byte, error) {
	type plain WindowRecord
	return json.Marshal(struct {
		plain
		LengthSeconds float64 `json:"length_seconds"`
	}{plain(w), w.Length.Seconds()})
}

var (
	_ slog.LogValuer = Report{}
	_ json.Marshaler = Report{}
)
