package readrecovery

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/readrecovery/readrecovery/otelattr"
)

// Azure's millisecond fields are a floor on the wait: never shorter than
// they ask, above the ceiling a stop, malformed a diagnosis (and still never
// shorter than Retry-After). The typed RetryAfter describes the Retry-After
// field; the report, the span and the log say the floor applied.
func TestMillisecondFloor(t *testing.T) {
	cases := []struct {
		name    string
		headers []string
		gap     time.Duration // between the 429 and the re-send; 0: no re-send
		kind    RetryAfterKind
		floorMs int64
		stop    StopReason
		diag    string
	}{
		{"retry-after-ms alone", []string{"retry-after-ms", "2500"}, 2500 * time.Millisecond, RetryAfterMissing, 2500, "", "retry-after"},
		{"x-ms-retry-after-ms above Retry-After", []string{"Retry-After", "1", "x-ms-retry-after-ms", "1750"}, 1750 * time.Millisecond, RetryAfterSeconds, 1750, "", ""},
		{"Retry-After above the floor", []string{"Retry-After", "3", "retry-after-ms", "1200"}, 3 * time.Second, RetryAfterSeconds, 0, "", ""},
		{"key in upper case", []string{"RETRY-AFTER-MS", "2000"}, 2 * time.Second, RetryAfterMissing, 2000, "", "retry-after"},
		{"malformed floor, never shorter", []string{"Retry-After", "2", "retry-after-ms", "-5"}, 2 * time.Second, RetryAfterSeconds, 0, "", "retry-after-ms"},
		{"a valid floor beside a malformed one (docs/policy.md's example)", []string{"Retry-After", "1", "retry-after-ms", "2500", "x-ms-retry-after-ms", "-1"}, 2500 * time.Millisecond, RetryAfterSeconds, 2500, "", "x-ms-retry-after-ms"},
		{"a valid floor beside a duplicated one", []string{"Retry-After", "1", "x-ms-retry-after-ms", "1800", "retry-after-ms", "1", "retry-after-ms", "2"}, 1800 * time.Millisecond, RetryAfterSeconds, 1800, "", "retry-after-ms"},
		{"a valid floor beside a malformed Retry-After", []string{"Retry-After", "soon", "retry-after-ms", "2200"}, 2200 * time.Millisecond, RetryAfterInvalid, 2200, "", "retry-after"},
		{"floor above the ceiling stops", []string{"Retry-After", "1", "retry-after-ms", "45000"}, 0, RetryAfterSeconds, 0, StopOverlong, ""},
		{"oversized floor stops", []string{"Retry-After", "1", "retry-after-ms", string(make([]byte, 200))}, 0, RetryAfterSeconds, 0, StopOversized, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, append([]string{"x-ms-request-id", "r1"}, tc.headers...)...), reply(200)))
				tr, rec, tp := newTraced(srv)
				b := NewBudget("s")
				ctx, span := tp.Tracer("test").Start(WithBudget(context.Background(), b), "read")
				resp, err := tr.RoundTrip(get(t, ctx, base+"/x"))
				span.End()
				require.NoError(t, err)
				hits := srv.Hits()
				r := b.Report()
				if tc.stop != "" {
					assert.Equal(t, 429, resp.StatusCode, "the 429 goes back untouched")
					assert.Len(t, hits, 1)
					assert.Equal(t, tc.stop, r.Stop)
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
				require.Len(t, hits, 2)
				assert.Equal(t, tc.gap, hits[1].At.Sub(hits[0].At))
				require.Len(t, r.WaitLog, 1)
				w := r.WaitLog[0]
				assert.Equal(t, tc.kind, w.RetryAfter.Kind)
				assert.Equal(t, tc.floorMs, w.FloorMs)
				assert.Equal(t, tc.gap, w.Actual)
				if tc.diag != "" {
					assert.Contains(t, w.Diagnostic, tc.diag)
				} else {
					assert.Empty(t, w.Diagnostic)
				}
				var attrs []attribute.KeyValue
				for _, s := range rec.Ended() {
					if s.Name() == otelattr.WaitSpanName {
						attrs = s.Attributes()
					}
				}
				if tc.floorMs > 0 {
					assert.Contains(t, attrs, otelattr.RetryAfterFloorMs.Int64(tc.floorMs))
				} else {
					for _, a := range attrs {
						assert.NotEqual(t, otelattr.RetryAfterFloorMs, a.Key)
					}
				}
			})
		})
	}
}

// floorJournal keeps the timing the transport gave Backoff.
type floorJournal struct {
	hookLog
	timing *RetryAfterTiming
}

func (j *floorJournal) Backoff(ctx context.Context, r JournalRequest, o JournalOutcome, ra RetryAfter, tm *RetryAfterTiming) (string, error) {
	j.timing = tm
	return "sha256:e", nil
}

// The journal keeps the floor too, its not-before rounded up to the whole
// second.
func TestMillisecondFloorInTheJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "retry-after-ms", "2500"), reply(201)))
		j := &floorJournal{}
		b := NewBudget("batch")
		ctx := WithJournal(WithQueueRetry(WithBudget(context.Background(), b)), j)
		t0 := time.Now().Unix()
		resp, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "x"))
		require.NoError(t, err)
		assert.Equal(t, 201, resp.StatusCode)
		assert.Equal(t, &RetryAfterTiming{ReceivedAtUTC: t0, NotBeforeUTC: t0 + 3, ServerDelaySeconds: 3}, j.timing)
	})
}

// nbJournal refuses Admit before the not-before it recorded for the last
// 429, as the journal's status does (whole seconds).
type nbJournal struct {
	hookLog
	notBefore int64
	refused   int
}

func (j *nbJournal) Admit(ctx context.Context, now time.Time) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if now.Unix() < j.notBefore {
		j.refused++
		return restrictedErr{}
	}
	return nil
}

func (j *nbJournal) Backoff(ctx context.Context, r JournalRequest, o JournalOutcome, ra RetryAfter, tm *RetryAfterTiming) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.notBefore = tm.NotBeforeUTC
	return "sha256:e", nil
}

// millisecond-floor with a journal: the in-process wait ends no earlier
// than the not-before the journal recorded (rounded up to the whole
// second), so the journal allows the one re-send and the sequence goes on.
func TestFloorWaitsForTheJournalsNotBefore(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(t *testing.T, ctx context.Context) *http.Request
	}{
		{"queue-429 PUT", func(t *testing.T, ctx context.Context) *http.Request {
			return mutation(t, WithQueueRetry(ctx), http.MethodPut, base+"/files/a", "x")
		}},
		{"read-429 GET", func(t *testing.T, ctx context.Context) *http.Request { return get(t, ctx, base+"/files") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, "retry-after-ms", "1500"), reply(201), reply(200)))
				j := &nbJournal{}
				b := NewBudget("batch")
				ctx := WithJournal(WithBudget(context.Background(), b), j)
				t0 := time.Now()
				resp, err := New(srv).RoundTrip(tc.req(t, ctx))
				require.NoError(t, err)
				assert.Equal(t, 201, resp.StatusCode)
				hits := srv.Hits()
				require.Len(t, hits, 2)
				assert.Equal(t, 2*time.Second, hits[1].At.Sub(t0), "the journal's rounded not-before")
				assert.Zero(t, j.refused)
				resp, err = New(srv).RoundTrip(get(t, ctx, base+"/files"))
				require.NoError(t, err, "the sequence goes on")
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, StopReason(""), b.Report().Stop)
			})
		})
	}
}
