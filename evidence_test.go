package readrecovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/otelattr"
)

// evidence-in-report: the report keeps requests, waits and their length, the stop reason,
// the mutation outcome, and bounded lists of read IDs (ETag of successes).
func TestReportBoundedEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			id := fmt.Sprintf("rid-%03d", n)
			if n%2 == 0 {
				return reply(404, "x-ms-request-id", id)(req), nil
			}
			return reply(200, "x-ms-request-id", id, "ETag", fmt.Sprintf(`"etag-%d"`, n))(req), nil
		})
		b := NewBudget("inventory")
		readPages(t, New(srv), b, 100)
		r := b.Report()
		assert.Equal(t, 100, r.Requests)
		assert.Len(t, r.SuccessfulReads, 32)
		assert.Len(t, r.FailedReads, 32)
		assert.Equal(t, 18, r.DroppedSuccessfulReads)
		assert.Equal(t, 18, r.DroppedFailedReads)
		assert.Equal(t, ReadEvidence{StatusCode: 200, RequestID: "rid-001", ETag: `"etag-1"`}, r.SuccessfulReads[0])
		assert.Equal(t, ReadEvidence{StatusCode: 404, RequestID: "rid-002"}, r.FailedReads[0])
		assert.Nil(t, r.Mutation)
		assert.Equal(t, Ownership(""), r.Ownership)
	})
}

// evidence-in-report: the evidence keeps a read's request ID and ETag as the
// server sent them and sanitizes them when Report hands them out: an unsafe
// one, short or long (the long one digested at once), is a digest marker in
// the report and nowhere in its JSON.
func TestReportSanitizesReadEvidence(t *testing.T) {
	long := "rid-" + strings.Repeat("SECRET", 40)
	srv := newScript(sequenceOf(
		reply(200, "x-ms-request-id", "rid?sig=SECRET", "ETag", `"e?sig=SECRET"`),
		reply(404, "x-ms-request-id", long),
		reply(200, "x-ms-request-id", "r3", "ETag", strings.Repeat("E", 200)),
	))
	b := NewBudget("inventory")
	readPages(t, New(srv), b, 3)
	r := b.Report()
	assert.Equal(t, []ReadEvidence{
		{StatusCode: 200, RequestID: redact.ID("rid?sig=SECRET"), ETag: redact.ID(`"e?sig=SECRET"`)},
		{StatusCode: 200, RequestID: "r3", ETag: redact.ID(strings.Repeat("E", 200))},
	}, r.SuccessfulReads)
	assert.Equal(t, []ReadEvidence{{StatusCode: 404, RequestID: redact.ID(long)}}, r.FailedReads)
	for _, e := range append(r.SuccessfulReads, r.FailedReads...) {
		if e.RequestID != "r3" {
			assert.Regexp(t, `^sha256:[0-9a-f]{16}$`, e.RequestID)
		}
	}
	js, err := json.Marshal(r)
	require.NoError(t, err)
	assert.NotContains(t, string(js), "SECRET")
	assert.NotContains(t, r.String(), "SECRET")
	b.s.mu.Lock()
	assert.Equal(t, redact.ID(long), b.s.ev.failed[0].RequestID, "a value over redact.MaxIDLen is digested as it is recorded")
	assert.Equal(t, "rid?sig=SECRET", b.s.ev.succeeded[0].RequestID, "a short one is kept for Report to sanitize")
	b.s.mu.Unlock()
}

// readPages sends n GETs of sequence b through tr, each read to its end.
func readPages(t *testing.T, tr *Transport, b *Budget, n int) {
	t.Helper()
	ctx := WithBudget(context.Background(), b)
	for range n {
		resp, err := tr.RoundTrip(get(t, ctx, base+"/files"))
		require.NoError(t, err)
		drain(resp)
	}
}

// evidence-in-report: an ETag of safe characters is kept as it is (Blob checkpoint proof).
func TestETagKept(t *testing.T) {
	srv := newScript(sequenceOf(reply(200, "ETag", `"0x8DCAFE"`, "x-ms-request-id", "r1")))
	b := NewBudget("checkpoint")
	_, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/c/source"))
	require.NoError(t, err)
	assert.Equal(t, []ReadEvidence{{StatusCode: 200, RequestID: "r1", ETag: `"0x8DCAFE"`}}, b.Report().SuccessfulReads)
}

// ownership-needs-ack: owned only when the mutation itself got a 2xx.
func TestOwnershipNeedsACK(t *testing.T) {
	cases := []struct {
		name  string
		put   int
		get   int
		owner Ownership
	}{
		{"ack then found", 201, 200, Owned},
		{"ack then not found", 200, 404, Owned},
		{"409 then found", 409, 200, Observed},
		{"500 then found", 500, 200, Observed},
		{"429 then found", 429, 200, Observed},
		{"500 then not found", 500, 404, Unproven},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(tc.put), reply(tc.get)))
				b := NewBudget("s")
				ctx := WithBudget(context.Background(), b)
				tr := New(srv)
				_, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
				require.NoError(t, err)
				_, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
				require.NoError(t, err)
				assert.Equal(t, tc.owner, b.Report().Ownership)
				assert.Equal(t, tc.put >= 200 && tc.put < 300, b.Report().Mutation.Acked)
			})
		})
	}
}

// sanitized-request-ids: request IDs come from the first present of four headers and are
// sanitized.
func TestRequestIDs(t *testing.T) {
	long := strings.Repeat("a", 129)
	cases := []struct {
		name string
		kv   []string
		want string
	}{
		{"x-ms-request-id first", []string{"request-id", "b", "x-ms-request-id", "a", "x-request-id", "c"}, "a"},
		{"request-id second", []string{"x-request-id", "c", "request-id", "b", "apim-request-id", "d"}, "b"},
		{"x-request-id third", []string{"apim-request-id", "d", "x-request-id", "c"}, "c"},
		{"apim-request-id last", []string{"apim-request-id", "d"}, "d"},
		{"none", nil, ""},
		{"safe characters kept", []string{"x-ms-request-id", "0f8c-1A._:z"}, "0f8c-1A._:z"},
		{"128 characters kept", []string{"x-ms-request-id", long[:128]}, long[:128]},
		{"129 characters digested", []string{"x-ms-request-id", long}, "sha256:"},
		{"unsafe characters digested", []string{"x-ms-request-id", "id with spaces"}, "sha256:"},
		{"injection digested", []string{"x-ms-request-id", "a\r\nAuthorization: x"}, "sha256:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(404, tc.kv...)))
			b := NewBudget("s")
			_, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
			require.NoError(t, err)
			got := b.Report().FailedReads[0].RequestID
			if tc.want == "sha256:" {
				assert.Regexp(t, `^sha256:[0-9a-f]{16}$`, got)
			} else {
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

// nothing-secret-leaves: nothing secret leaves the transport: no Authorization, no query
// string, no body in errors, spans, events or the report.
func TestNoSecretsAnywhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			reply(429, "Retry-After", "1", "x-ms-request-id", "r1"),
			reply(429, "Retry-After", "1", "x-ms-request-id", "r2"),
		))
		tr, rec, tp := newTraced(srv)
		b := NewBudget("checkpoint")
		ctx, span := tp.Tracer("test").Start(WithBudget(context.Background(), b), "read")
		req := get(t, ctx, "https://user:pw@acct.blob.core.windows.net/c/b?sv=2024&sig=TOPSECRETSIG")
		req.Header.Set("Authorization", "SharedKey acct:TOPSECRETKEY")
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		drain(resp)
		_, err = tr.RoundTrip(req.Clone(ctx))
		require.Error(t, err)
		span.End()
		var all strings.Builder
		all.WriteString(err.Error())
		rep, _ := json.Marshal(b.Report())
		all.Write(rep)
		for _, s := range rec.Ended() {
			for _, a := range s.Attributes() {
				all.WriteString(string(a.Key) + "=" + a.Value.String() + ";")
			}
			for _, e := range s.Events() {
				for _, a := range e.Attributes {
					all.WriteString(string(a.Key) + "=" + a.Value.String() + ";")
				}
			}
		}
		text := all.String()
		for _, secret := range []string{"TOPSECRET", "sig=", "sv=2024", "pw@", "user:", "body of"} {
			assert.NotContains(t, text, secret)
		}
		assert.Contains(t, text, "url.full=https://acct.blob.core.windows.net/c/b;")
	})
}

// every-wait-is-a-span: every wait is one span, a child of the request's span, with the
// listed attributes.
func TestWaitSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "2", "x-ms-request-id", "rid-9"), reply(200)))
		tr, rec, tp := newTraced(srv)
		b := NewBudget("index-a")
		ctx, parent := tp.Tracer("test").Start(WithBudget(context.Background(), b), "readback")
		resp, err := tr.RoundTrip(get(t, ctx, "https://acct.search.windows.net:443/indexes/a?api-version=2024-07-01"))
		require.NoError(t, err)
		drain(resp)
		parent.End()
		var waits []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == otelattr.WaitSpanName {
				waits = append(waits, s)
			}
		}
		require.Len(t, waits, 1)
		w := waits[0]
		assert.Equal(t, parent.SpanContext().SpanID(), w.Parent().SpanID())
		assert.Equal(t, parent.SpanContext().TraceID(), w.SpanContext().TraceID())
		assert.Equal(t, trace.SpanKindInternal, w.SpanKind())
		assert.Equal(t, 2e9, float64(w.EndTime().Sub(w.StartTime())))
		got := map[attribute.Key]attribute.Value{}
		for _, a := range w.Attributes() {
			got[a.Key] = a.Value
		}
		want := map[attribute.Key]attribute.Value{
			otelattr.SequenceName:           attribute.StringValue("index-a"),
			otelattr.WaitTrigger:            attribute.StringValue("read-429"),
			otelattr.RetryAfterKind:         attribute.StringValue("seconds"),
			otelattr.RetryAfterValue:        attribute.Int64Value(2),
			otelattr.ServerDelaySeconds:     attribute.Int64Value(2),
			otelattr.WaitPlannedSeconds:     attribute.Float64Value(2),
			otelattr.RequestID:              attribute.StringValue("rid-9"),
			otelattr.HTTPRequestMethod:      attribute.StringValue("GET"),
			otelattr.HTTPResponseStatusCode: attribute.IntValue(429),
			otelattr.ServerAddress:          attribute.StringValue("acct.search.windows.net"),
			otelattr.ServerPort:             attribute.IntValue(443),
			otelattr.HTTPRequestResendCount: attribute.IntValue(1),
			otelattr.URLFull:                attribute.StringValue("https://acct.search.windows.net:443/indexes/a"),
		}
		assert.Equal(t, want, got)
		assert.Equal(t, "Unset", w.Status().Code.String())
	})
}

// stop-is-recorded: a stop is a span event on the request's span, once, and a field of
// the report.
func TestStopEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "45")))
		tr, rec, tp := newTraced(srv)
		b := NewBudget("index-a")
		ctx, span := tp.Tracer("test").Start(WithBudget(context.Background(), b), "readback")
		resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		_, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.ErrorIs(t, err, ErrSequenceStopped)
		span.End()
		spans := rec.Ended()
		require.Len(t, spans, 1, "no wait span for an overlong delay")
		ev := spans[0].Events()
		require.Len(t, ev, 1)
		assert.Equal(t, otelattr.StopEventName, ev[0].Name)
		assert.Contains(t, ev[0].Attributes, otelattr.StopReason.String("overlong-retry-after"))
		assert.Contains(t, ev[0].Attributes, otelattr.SequenceRequests.Int(1))
		assert.Equal(t, StopOverlong, b.Report().Stop)
	})
}

// ownership-needs-ack: a read before the mutation proves nothing about what the mutation
// created.
func TestReadBeforeMutationIsNotObservation(t *testing.T) {
	srv := newScript(sequenceOf(reply(200), reply(500)))
	b := NewBudget("s")
	ctx := WithBudget(context.Background(), b)
	tr := New(srv)
	_, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
	require.NoError(t, err)
	_, err = tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
	require.NoError(t, err)
	assert.Equal(t, Unproven, b.Report().Ownership)
}
