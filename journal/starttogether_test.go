package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/require"
)

// startTogether opens one new run from n goroutines released at the same
// moment and returns the errors of the opens that failed and the
// journals of those that did not.
func startTogether(n int, open func() (*Journal, error)) ([]error, []*Journal) {
	var (
		mu   sync.Mutex
		errs []error
		js   []*Journal
		wg   sync.WaitGroup
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			j, err := open()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				js = append(js, j)
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs, js
}

// TestWorkersStartTogether: any number of workers opening the same new run
// at the same moment all open it, clear, with the same plan; none fails
// and none sees the half-created run (R84).
func TestWorkersStartTogether(t *testing.T) {
	plan := manyFiles(40)
	for _, tc := range []struct {
		kind    string
		workers int
		shards  int
	}{
		{"dir", 240, 16},
		{"dir", 240, 0},
		{"mem", 90, 0},
		{"mem", 90, 4},
		{"mem+prefix", 90, 16},
	} {
		t.Run(fmt.Sprintf("%s/%d workers/%d shards", tc.kind, tc.workers, tc.shards), func(t *testing.T) {
			r := newShardedRun(t, tc.kind)
			if r.mem != nil {
				r.mem.delay = time.Millisecond // a store across a network
			}
			opts := []Option{withClock(newFakeClock(t0)), WithPlan(plan)}
			if tc.shards > 0 {
				opts = append(opts, WithParallel(tc.shards))
			}
			errs, js := startTogether(tc.workers, func() (*Journal, error) {
				if r.dir != "" {
					return Open(r.dir, opts...)
				}
				return OpenStore(context.Background(), r.st, opts...)
			})
			unresolved := 0
			for _, j := range js {
				if st := j.Status(t0); st.State != Clear {
					unresolved++
					t.Logf("not clear: %s: %s", st.State, st.Reason)
				}
			}
			t.Logf("%d of %d opens failed, %d opened unresolved", len(errs), tc.workers, unresolved)
			if len(errs) > 0 {
				t.Fatalf("%d of %d opens failed; the first: %v", len(errs), tc.workers, errs[0])
			}
			require.Zero(t, unresolved)
			require.Len(t, js, tc.workers)
			for _, j := range js {
				require.Equal(t, tc.shards, j.Parallel())
				c, err := j.PlanContinuation(plan, NewApproval, t0)
				require.NoError(t, err)
				require.Len(t, c.Files, len(plan))
			}
			sum, err := InspectStore(context.Background(), r.st)
			require.NoError(t, err)
			require.Empty(t, sum.Findings)
			require.Equal(t, len(plan), sum.PlannedFiles)
			// One manifest recording the plan: a later open with another
			// plan is refused.
			_, err = OpenStore(context.Background(), r.st, append(opts, WithPlan(plan3))...)
			require.ErrorIs(t, err, ErrPlanMismatch)
			if r.dir != "" {
				// No temporary file of a losing write is left behind.
				for _, n := range allNames(t, r.dir) {
					_, tmp := record.ParseTempName(filepath.Base(n))
					require.False(t, tmp, n)
				}
			}
		})
	}
}

// TestCreationInterruptedIsFinished crashes the creation of a run (with
// and without shards) before each of its steps, tearing each write, and
// opens the run again: the next Open finishes the creation, clear, with
// the plan of the first (R84: no dead end before any request was sent).
func TestCreationInterruptedIsFinished(t *testing.T) {
	for _, shards := range []int{0, 2} {
		opts := []Option{withClock(newFakeClock(t0)), WithPlan(parPlan)}
		if shards > 0 {
			opts = append(opts, WithParallel(shards))
		}
		name := fmt.Sprintf("create/%d shards", shards)
		run := func(t *testing.T, ff *faultFS) (string, bool, error) {
			dir := filepath.Join(t.TempDir(), "run")
			_, err := Open(dir, append(opts, withFS(ff))...)
			return dir, false, err
		}
		ref := newFaultFS()
		_, _, err := run(t, ref)
		require.NoError(t, err)
		n := crashEach(t, name, ref.ops, run, func(t *testing.T, i int, steps []string, dir string, _ bool, _ error) {
			// The creator again, then a worker without a plan (which
			// finishes with the plan plan.json records).
			noPlan := []Option{withClock(newFakeClock(t0.Add(time.Minute)))}
			if shards > 0 {
				noPlan = append(noPlan, WithParallel(shards))
			}
			for _, again := range [][]Option{opts, noPlan} {
				j, err := Open(dir, again...)
				require.NoError(t, err)
				st := j.Status(t0.Add(time.Minute))
				require.Equal(t, Clear, st.State, st.Reason)
				require.Equal(t, shards, j.Parallel())
			}
			sum, err := inspectDir(dir)
			require.NoError(t, err)
			require.Empty(t, sum.Findings)
			require.Equal(t, len(parPlan), sum.PlannedFiles)
			_, err = Open(dir, withClock(newFakeClock(t0)), WithPlan(plan3))
			require.ErrorIs(t, err, ErrPlanMismatch)
		})
		t.Logf("%s: %d crash points", name, n)
	}
}
