package readrecovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write 429, a readback that waits 3 s and finds the object: the report
// as a line, as a log group and as JSON with durations in seconds.
func TestReportShowsItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			reply(429, "Retry-After", "3", "x-ms-request-id", "put-1"),
			reply(200, "x-ms-request-id", "get-1"),
		))
		b := NewBudget("index a")
		ctx := WithBudget(context.Background(), b)
		tr := New(srv)
		_, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.NoError(t, err)
		_, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		r := b.Report()

		assert.Equal(t, `sequence "index a": requests=2 waits=1 wait=3s window=write-429/3s stop=- mutations=1 ownership=observed reads ok=1 failed=0`, r.String())
		assert.Equal(t, r.String(), fmt.Sprint(r))

		var logged bytes.Buffer
		slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{ReplaceAttr: dropTime})).Info("done", "report", r)
		assert.JSONEq(t, `{"level":"INFO","msg":"done","report":{"sequence":"index a","requests":2,"waits":1,"wait_seconds":3,
			"window":{"trigger":"write-429","length_seconds":3,"joined":0},"mutations":1,"ownership":"observed","reads_ok":1,"reads_failed":0}}`, logged.String())

		raw, err := json.Marshal(r)
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(raw, &got))
		assert.Equal(t, 3.0, got["wait_seconds"])
		assert.NotContains(t, got, "wait_time", "durations are seconds, never nanoseconds")
		w := got["wait_log"].([]any)[0].(map[string]any)
		assert.Equal(t, 3.0, w["planned_seconds"])
		assert.Equal(t, 3.0, w["actual_seconds"])
		assert.NotContains(t, w, "planned")
		assert.Equal(t, 3.0, got["window"].(map[string]any)["length_seconds"])
	})
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// WithLogger: one record per wait (Info) and per stop (Warn), sanitized;
// nothing for requests that pass through.
func TestLoggerRecordsWaitsAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			reply(200),
			reply(429, "Retry-After", "2", "x-ms-request-id", "r-429"),
			reply(200),
			reply(429, "Retry-After", "1", "x-ms-request-id", "r-again"),
		))
		var logged bytes.Buffer
		tr := New(srv, WithLogger(slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{ReplaceAttr: dropTime}))))
		_, err := tr.RoundTrip(get(t, context.Background(), base+"/files?sig=SECRET"))
		require.NoError(t, err)
		assert.Empty(t, logged.String(), "nothing on pass-through")

		b := NewBudget("inventory")
		ctx := WithBudget(context.Background(), b)
		_, err = tr.RoundTrip(get(t, ctx, base+"/files?sig=SECRET"))
		require.NoError(t, err)
		_, err = tr.RoundTrip(get(t, ctx, base+"/files?sig=SECRET"))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
		require.Len(t, lines, 2)
		assert.JSONEq(t, `{"level":"INFO","msg":"readrecovery: wait","sequence":"inventory","trigger":"read-429","method":"GET","resend":true,
			"retry_after_kind":"seconds","retry_after_value":2,"planned_seconds":2,"actual_seconds":2,"floor_ms":0,"request_id":"r-429",
			"server_address":"acct.search.windows.net","url":"https://acct.search.windows.net/files","canceled":false}`, lines[0])
		assert.JSONEq(t, `{"level":"WARN","msg":"readrecovery: sequence stopped","sequence":"inventory","reason":"opportunity-used",
			"detail":"a 429 came after the sequence's one wait window: its one opportunity to wait is used","status":429,"request_id":"r-again","requests":3}`, lines[1])
		assert.NotContains(t, logged.String(), "SECRET")
		assert.Equal(t, 2*time.Second, b.Report().WaitTime)
	})
}
