package journal

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
)

// A zero Journal and a nil *Journal are refused by every method, never a
// panic: unresolved, so nothing is ever sent under one.
func TestZeroJournalIsRefused(t *testing.T) {
	for name, j := range map[string]*Journal{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := j.Status(t0)
			assert.Equal(t, Unresolved, st.State)
			assert.Equal(t, errZero.Error(), st.Reason)
			require.ErrorIs(t, j.Admit(ctx, t0), ErrRestricted)
			require.ErrorIs(t, j.Admit(ctx, t0), errZero)
			var restricted interface{ JournalRestricted() }
			require.ErrorAs(t, j.Begin(ctx, getReq(t)), &restricted)
			require.ErrorIs(t, j.Complete(ctx, getReq(t), readrecovery.JournalOutcome{StatusCode: 200}), errZero)
			_, err := j.Backoff(ctx, getReq(t), out429("x"), secs(1), timing(t0, 1))
			require.ErrorIs(t, err, errZero)
			_, err = j.PlanContinuation(plan3, NewApproval, t0)
			require.ErrorIs(t, err, errZero)
			_, err = j.RecordedPlan(t0)
			require.ErrorIs(t, err, errZero)
			_, err = j.Review(ctx, "a.bin", DecisionSkip, "")
			require.ErrorIs(t, err, errZero)
			_, err = j.ReviewPending(ctx, "", 0)
			require.ErrorIs(t, err, errZero)
			assert.Equal(t, "", j.Dir())
		})
	}
	j, _ := newRun(t)
	var nilCtx context.Context
	require.Error(t, j.Admit(nilCtx, time.Now()))
	require.Error(t, j.Begin(nilCtx, getReq(t)))
	_, err := OpenStore(nilCtx, newMemStore())
	require.Error(t, err)
	_, err = OpenStore(context.Background(), nil)
	require.Error(t, err)
	var typedNil *memStore
	_, err = InspectStore(context.Background(), nil)
	require.Error(t, err)
	_, err = InspectStore(nilCtx, typedNil)
	require.Error(t, err)
}
