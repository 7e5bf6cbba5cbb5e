package readrecovery

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stop-not-shorten, R89: every documented ceiling on a wait is a
// boundary: a delay exactly at it is waited in full and the GET re-sent
// then; one just above stops the sequence with no wait.
func TestWaitCeilingBoundaries(t *testing.T) {
	cases := []struct {
		name   string
		kv     []string
		opts   []BudgetOption
		waited time.Duration // 0: stopped
		stop   StopReason
	}{
		{"Retry-After exactly at the 30 s ceiling", []string{"Retry-After", "30"}, nil, MaxServerWait, ""},
		{"Retry-After one second above the ceiling", []string{"Retry-After", "31"}, nil, 0, StopOverlong},
		{"a millisecond floor exactly at the ceiling", []string{"Retry-After", "1", "retry-after-ms", "30000"}, nil, MaxServerWait, ""},
		{"a millisecond floor 1 ms above the ceiling", []string{"Retry-After", "1", "retry-after-ms", "30001"}, nil, 0, StopOverlong},
		{"exactly at MaxWait(5 s)", []string{"Retry-After", "5"}, []BudgetOption{MaxWait(5 * time.Second)}, 5 * time.Second, ""},
		{"one second above MaxWait(5 s)", []string{"Retry-After", "6"}, []BudgetOption{MaxWait(5 * time.Second)}, 0, StopOverlong},
		{"a millisecond floor exactly at MaxWait(5 s)", []string{"retry-after-ms", "5000"}, []BudgetOption{MaxWait(5 * time.Second)}, 5 * time.Second, ""},
		{"a millisecond floor 1 ms above MaxWait(5 s)", []string{"retry-after-ms", "5001"}, []BudgetOption{MaxWait(5 * time.Second)}, 0, StopOverlong},
		{"MaxWait(0): a zero delay is waited", []string{"Retry-After", "0"}, []BudgetOption{MaxWait(0)}, 0, ""},
		{"MaxWait(0): one second stops", []string{"Retry-After", "1"}, []BudgetOption{MaxWait(0)}, 0, StopOverlong},
	}
	require.Equal(t, 30*time.Second, MaxServerWait, "the documented ceiling")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, tc.kv...), reply(200)))
				b := NewBudget("s", tc.opts...)
				tr := New(srv)
				t0 := time.Now()
				resp, err := tr.RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
				require.NoError(t, err)
				drain(resp)
				hits := srv.Hits()
				if tc.stop != "" {
					assert.Equal(t, 429, resp.StatusCode)
					assert.Len(t, hits, 1, "no re-send")
					assert.Equal(t, time.Duration(0), time.Since(t0), "no wait")
					assert.Equal(t, tc.stop, b.Report().Stop)
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
				require.Len(t, hits, 2)
				assert.Equal(t, tc.waited, hits[1].At.Sub(t0), "waited in full, re-sent then")
				assert.Equal(t, StopReason(""), b.Report().Stop)
				assert.Equal(t, 1, b.Report().Waits)
			})
		})
	}
}

// shared-restriction, R89: a shared restriction whose T lies beyond the
// end of a sequence's open window moves that window out: every request of
// the sequence not yet sent, restricted or not (the 429's own re-send
// included), waits until the later T.
func TestSharedRestrictionMovesOpenWindow(t *testing.T) {
	s := &sequence{name: "s"}
	restrictedAt := func(t time.Duration) *request {
		return &request{shared: &restricted{t: t0.Add(t), until: t0.Add(t), gen: 1, plan: sharedPlan("r1")}}
	}
	runSteps(t, s, []decide{
		{at: 0, req: read, want: sendNow(1)},
		{at: 0, req: read, want: sendNow(2)},
		{at: 0, in: read429(s1), want: resendAt(s1)}, // the window: until +1 s
		{at: 0, req: restrictedAt(s3), want: waitTill(s3)},
		{at: s1, req: &request{claimed: true}, want: waitTill(s3)}, // the re-send: the window moved
		{at: s1, req: read, want: waitTill(s3)},                    // an unrestricted read too
		{at: s3, req: &request{claimed: true}, want: sendLate(3)},
	})
	assert.Equal(t, t0.Add(s3), s.win.until)
	assert.Equal(t, s3, s.win.rec.Length, "the window record says how long it was")
}
