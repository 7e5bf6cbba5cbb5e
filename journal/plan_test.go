package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decisions abbreviates a continuation: state and Upload per file.
func decisions(c Continuation) map[string]string {
	out := map[string]string{}
	for _, f := range c.Files {
		v := string(f.State)
		if f.Upload {
			v += "+upload"
		}
		out[f.ID] = v
	}
	return out
}

// TestPlanContinuation: acked files are never re-sent, unknown ones
// never replayed, never-attempted ones only under a new approval and while
// the status allows uploads; fresh approval does not waive a server delay.
func TestPlanContinuation(t *testing.T) {
	j, clk := newRun(t)
	plan := func(a Approval, now time.Time) map[string]string {
		t.Helper()
		c, err := j.PlanContinuation(plan3, a, now)
		require.NoError(t, err)
		return decisions(c)
	}
	assert.Equal(t, map[string]string{"a.bin": "never-attempted", "b.bin": "never-attempted", "c.bin": "never-attempted"},
		plan(NoNewApproval, t0), "no new approval: nothing is sent")
	assert.Equal(t, map[string]string{"a.bin": "never-attempted+upload", "b.bin": "never-attempted+upload", "c.bin": "never-attempted+upload"},
		plan(NewApproval, t0))

	// a.bin is acknowledged; b.bin meets an overlong 429 (the run stops).
	a := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, j.Complete(a, putReq(t), readrecovery.JournalOutcome{StatusCode: 201, RequestID: "ok"}))
	record429(t, j, WithUpload(context.Background(), "b.bin"), putReq(t), overlong, timing(t0, 60))

	// A later invocation, 10 s on: still waiting; the new approval does not
	// waive the delay.
	assert.Equal(t, map[string]string{"a.bin": "acked", "b.bin": "unknown", "c.bin": "never-attempted"},
		plan(NewApproval, t0.Add(10*time.Second)))
	// Elapsed: only the never-attempted file, and only with a new approval.
	assert.Equal(t, map[string]string{"a.bin": "acked", "b.bin": "unknown", "c.bin": "never-attempted+upload"},
		plan(NewApproval, t0.Add(60*time.Second)))
	assert.Equal(t, map[string]string{"a.bin": "acked", "b.bin": "unknown", "c.bin": "never-attempted"},
		plan(NoNewApproval, t0.Add(60*time.Second)))

	c, err := j.PlanContinuation(plan3, NewApproval, t0.Add(60*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []string{"c.bin"}, c.Uploads())
	assert.Equal(t, 1, c.Count(FileAcked))
	assert.Equal(t, "backoff-0001.json: its upload met 429, no ACK on record; never replayed, needs operator review", c.Files[1].Reason)

	// c.bin's upload fails without a response: unknown, never replayed.
	clk.Set(t0.Add(60 * time.Second))
	cc := WithUpload(context.Background(), "c.bin")
	require.NoError(t, j.Begin(cc, putReq(t)))
	require.NoError(t, j.Complete(cc, putReq(t), readrecovery.JournalOutcome{TransportError: "read tcp: connection reset"}))
	assert.Equal(t, map[string]string{"a.bin": "acked", "b.bin": "unknown", "c.bin": "unknown"},
		plan(NewApproval, t0.Add(61*time.Second)))
	require.ErrorIs(t, j.Begin(cc, putReq(t)), errReplay)

	// Another process reads the same.
	j2 := reopen(t, j.Dir(), t0.Add(61*time.Second))
	c2, err := j2.PlanContinuation([]PlannedFile{{ID: "c.bin"}, {ID: "a.bin"}, {ID: "b.bin"}}, NewApproval, t0.Add(61*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []FileState{FileUnknown, FileAcked, FileUnknown}, states(c2), "in the order given")
	assert.Empty(t, c2.Uploads())

	_, err = j2.PlanContinuation(plan3[:2], NewApproval, t0)
	require.ErrorIs(t, err, ErrPlanMismatch)
}

// TestPendingAndCorruptRecordsAreUnknown: a marker naming a file (a
// crash mid-upload) and a receipt that fails verification make the file
// unknown, and the run unresolved: nothing is sent.
func TestPendingAndCorruptRecordsAreUnknown(t *testing.T) {
	j, _ := newRun(t)
	b := WithUpload(context.Background(), "b.bin")
	require.NoError(t, j.Begin(b, putReq(t)))
	// The process dies here: the marker stays.
	j2 := reopen(t, j.Dir(), t0)
	c, err := j2.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Equal(t, Unresolved, c.Status.State)
	assert.Equal(t, map[string]string{"a.bin": "never-attempted", "b.bin": "unknown", "c.bin": "never-attempted"}, decisions(c))
	assert.Equal(t, "pending-request.json: its upload's outcome is unknown; never replayed, needs operator review", c.Files[1].Reason)

	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan3, t0, nil, []string{"c.bin"})
	editByte(t, filepath.Join(dir, receiptName(record.FileDigest("c.bin"))), 20)
	c, err = reopen(t, dir, t0).PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a.bin": "never-attempted", "b.bin": "never-attempted", "c.bin": "unknown"}, decisions(c))

	require.NoError(t, os.Remove(filepath.Join(dir, "run.json")))
	_, err = reopen(t, dir, t0).PlanContinuation(plan3, NewApproval, t0)
	require.ErrorIs(t, err, runread.ErrCorrupt)
}
