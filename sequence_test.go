package readrecovery

import (
	"testing"
	"time"
)

// The policy's state machine as step tables at fixed times, in the style
// of golang.org/x/time/rate's rate_test.go: each row is one decision at
// t0.Add(at), compared whole. Each table is one rule of docs/policy.md.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// outcome is a decision reduced to what the rules speak of: the step, the
// time it names (offset from t0), the stop reason, and for admissions the
// late mark and the ordinal of a counted send.
type outcome struct {
	step    step
	until   time.Duration
	reason  StopReason
	late    bool
	ordinal int
	resend  bool
}

// decide is one row: an admission of req, or a 429 (in), or a release, at
// t0.Add(at).
type decide struct {
	at      time.Duration
	req     *request
	in      *response429
	release bool
	want    outcome
}

func runSteps(t *testing.T, s *sequence, steps []decide) {
	t.Helper()
	for i, d := range steps {
		now := t0.Add(d.at)
		var got outcome
		switch {
		case d.release:
			s.releaseAt(now)
			continue
		case d.req != nil:
			a := s.admitAt(at(now), *d.req)
			got = outcome{step: a.step, late: a.late, ordinal: a.ordinal}
			if a.step == stepWait {
				got.until = a.until.Sub(t0)
			}
			if a.err != nil {
				got.reason = a.err.Reason
			}
		case d.in != nil:
			in := *d.in
			in.received = now
			v := s.on429At(now, in)
			got = outcome{resend: v.resend}
			if v.resend {
				got.until = v.until.Sub(t0)
			}
			if v.err != nil {
				got.reason = v.err.Reason
			}
		}
		if got != d.want {
			t.Fatalf("step %d at +%v: got %+v, want %+v", i, d.at, got, d.want)
		}
	}
}

var (
	read     = &request{}
	write    = &request{mutation: true}
	sendNow  = func(ordinal int) outcome { return outcome{step: stepSend, ordinal: ordinal} }
	sendLate = func(ordinal int) outcome { return outcome{step: stepSend, ordinal: ordinal, late: true} }
	waitTill = func(d time.Duration) outcome { return outcome{step: stepWait, until: d} }
	refused  = func(r StopReason) outcome { return outcome{step: stepRefuse, reason: r} }
	resendAt = func(d time.Duration) outcome { return outcome{resend: true, until: d} }
	stopped  = func(r StopReason) outcome { return outcome{reason: r} }
)

func read429(delay time.Duration) *response429 {
	return &response429{trigger: triggerRead429, delay: delay, plan: waitPlan{trigger: triggerRead429, status: 429}}
}

func write429(delay time.Duration) *response429 {
	return &response429{trigger: triggerWrite429, delay: delay, plan: waitPlan{trigger: triggerWrite429, status: 429}}
}

func late(in *response429) *response429 { c := *in; c.late = true; return &c }

func again(in *response429) *response429 { c := *in; c.resend = true; return &c }

const s1, s2, s3 = time.Second, 2 * time.Second, 3 * time.Second

func TestSequenceRules(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		limits limits
		steps  []decide
	}{
		{"count-what-was-sent: every admitted request is counted once, in order", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: s1, req: read, want: sendNow(2)},
			{at: s1, req: &request{hold: true}, want: sendNow(0)}, // its journal first
			{at: s1, req: &request{claimed: true}, want: sendNow(3)},
		}},
		{"limits-only-tighten: the request limit counts claims, a release gives one back", limits{requests: 2}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, req: &request{hold: true}, want: sendNow(0)},
			{at: 0, release: true},
			{at: 0, req: read, want: sendNow(2)},
			{at: 0, req: read, want: refused(StopRequestsExhausted)},
		}},
		{"total-cuts-off: the total counts from the first request", limits{total: 10 * time.Second}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 9 * time.Second, req: read, want: sendNow(2)},
			{at: 10 * time.Second, req: read, want: refused(StopTotalExhausted)},
		}},
		{"stopped-stays-stopped: after a stop every request is refused with it", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: again(read429(s1)), want: stopped(StopPersistent429)},
			{at: s1, req: read, want: refused(StopPersistent429)},
			{at: s2, req: write, want: refused(StopPersistent429)},
		}},
		{"get-only-resend and one-window-per-sequence: a read's 429 opens the window; others wait until T", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: read429(s2), want: resendAt(s2)},
			{at: s1, req: read, want: waitTill(s2)},
			{at: s2, req: &request{claimed: true}, want: sendLate(2)}, // the one that waited
			{at: s2, req: &request{claimed: true}, want: sendLate(3)}, // the re-send
		}},
		{"wait-before-readback: a mutation's 429 keeps its delay for the readback, and is not re-sent", limits{}, []decide{
			{at: 0, req: write, want: sendNow(1)},
			{at: 0, in: write429(s3), want: outcome{}},
			{at: s1, req: read, want: waitTill(s3)},
			{at: s3, req: &request{claimed: true}, want: sendLate(2)},
		}},
		{"queue-429-route: a marked upload's 429 is re-sent", limits{}, []decide{
			{at: 0, req: write, want: sendNow(1)},
			{at: 0, in: &response429{trigger: triggerQueue429, delay: s1}, want: resendAt(s1)},
		}},
		{"in-flight-joins: a 429 of a request sent before the window joins it and moves T out", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, req: read, want: sendNow(2)},
			{at: 0, req: read, want: sendNow(3)},
			{at: 0, in: read429(s2), want: resendAt(s2)},
			{at: 0, in: read429(s1), want: resendAt(s2)},  // joins: no earlier than T
			{at: s1, in: read429(s2), want: resendAt(s3)}, // its own not-before is later
			{at: s1, req: read, want: waitTill(s3)},       // T moved for everyone
			{at: s3, in: late(read429(s1)), want: stopped(StopOpportunityUsed)},
		}},
		{"in-flight-joins: a joining 429 that would push the window past the total stops", limits{total: 5 * time.Second}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, req: read, want: sendNow(2)},
			{at: 0, in: read429(s2), want: resendAt(s2)},
			{at: s1, in: read429(4 * time.Second), want: stopped(StopWaitExceedsTotal)},
			{at: s1, req: read, want: refused(StopWaitExceedsTotal)},
		}},
		{"in-flight-joins: a joining 429 above the wait ceiling stops", limits{wait: 3 * time.Second, waitSet: true}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, req: read, want: sendNow(2)},
			{at: 0, in: read429(s2), want: resendAt(s2)},
			{at: 0, in: read429(4 * time.Second), want: stopped(StopOverlong)},
		}},
		{"stop-not-shorten: a delay above the wait ceiling stops, never shortened", limits{wait: s2, waitSet: true}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: read429(s3), want: stopped(StopOverlong)},
		}},
		{"stop-not-shorten: a delay longer than what remains of the total stops", limits{total: 10 * time.Second}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 8 * time.Second, in: read429(s2), want: stopped(StopWaitExceedsTotal)},
		}},
		{"stop-not-shorten: a parser refusal (oversized field) stops", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: &response429{trigger: triggerRead429, refuse: StopOversized}, want: stopped(StopOversized)},
		}},
		{"journal not-before: the re-send waits for the journal's rounded not-before", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: &response429{trigger: triggerRead429, delay: 1500 * time.Millisecond, notBefore: t0.Add(s2)}, want: resendAt(s2)},
		}},
		{"limits-only-tighten: no request left for the re-send stops", limits{requests: 1}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: read429(s1), want: stopped(StopRequestsExhausted)},
		}},
		// The repeats themselves are refused by the Transport's one table
		// before the state machine is asked (repeatguard_test.go:
		// TestRepeatGuardTable): here, the sequence after a write 429.
		{"repeat-guard: a refused repeat never reaches the policy; the sequence goes on", limits{}, []decide{
			{at: 0, req: &request{mutation: true}, want: sendNow(1)},
			{at: 0, in: &response429{trigger: triggerWrite429, delay: s1}, want: outcome{}},
			{at: s2, req: &request{mutation: true}, want: sendLate(2)},
			{at: s2, req: read, want: sendLate(3)},
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			runSteps(t, &sequence{name: "s", limits: tc.limits}, tc.steps)
		})
	}
}

// The triggers table decides every request kind.
func TestTriggerTable(t *testing.T) {
	for _, tc := range []struct {
		f    triggerFacts
		want trigger
	}{
		{triggerFacts{get: true, replayable: true}, triggerRead429},
		{triggerFacts{get: true}, triggerNone}, // a GET whose body cannot be sent again
		{triggerFacts{mutation: true, queue: true, replayable: true}, triggerQueue429},
		{triggerFacts{mutation: true, queue: true}, triggerWrite429}, // no GetBody: an ordinary mutation
		{triggerFacts{mutation: true, replayable: true}, triggerWrite429},
		{triggerFacts{replayable: true}, triggerNone}, // HEAD, OPTIONS, TRACE
	} {
		if got := triggerOf(tc.f); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
		}
	}
	for _, row := range triggers {
		if row.trigger.String() != row.name || row.name == "" {
			t.Errorf("trigger %d: name %q", row.trigger, row.name)
		}
	}
}
