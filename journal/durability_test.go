package journal

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
)

// durable is the write of an immutable file name: temporary file, write,
// fsync, close, link to the name that did not exist, directory fsync,
// then the temporary file removed and the directory fsynced again.
func durable(name string) []string {
	tmp := name + ".tmp"
	return []string{"create " + tmp, "write " + tmp, "fsync " + tmp, "close " + tmp, "link " + name, "syncdir run", "remove " + tmp, "syncdir run"}
}

// marker is the exclusive creation of the pending marker, durable before
// the request is sent.
// marker is written through its locked temporary file (R83) and stays
// open, locked, until after its removal (unmark).
var marker = []string{"create pending-request.json.tmp", "write pending-request.json.tmp", "fsync pending-request.json.tmp", "link pending-request.json", "syncdir run", "remove pending-request.json.tmp", "syncdir run"}

var unmark = []string{"remove pending-request.json", "syncdir run"}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// durability-order (STYLE: journal files): every record kind is written
// write → fsync → close → link → directory fsync, the marker is durable
// before the request, and the marker goes only after the record and the
// run's head are durable. The whole sequence of file-system steps is
// compared, so dropping, reordering or adding any step fails.
func TestDurabilityOrder(t *testing.T) {
	a := WithUpload(context.Background(), "a.bin")
	b := WithUploadPart(context.Background(), "b.bin")
	receiptA, partB := receiptName(record.FileDigest("a.bin")), record.PartName(record.FileDigest("b.bin"), 1)
	oldHead := []string{"remove head-0001.json", "syncdir run"}
	steps := []struct {
		name string
		run  func(t *testing.T, j *Journal)
		want []string
	}{
		{"backoff entry", func(t *testing.T, j *Journal) {
			record429(t, j, context.Background(), getReq(t), secs(1), timing(t0, 1))
		}, join(marker, durable("backoff-0001.json"), durable("head-0001.json"), unmark)},
		{"commit receipt", func(t *testing.T, j *Journal) {
			require.NoError(t, j.Begin(a, putReq(t)))
			require.NoError(t, j.Complete(a, putReq(t), readrecovery.JournalOutcome{StatusCode: 500}))
		}, join(marker, durable("head-0002.json"), oldHead, durable(receiptA), unmark)},
		{"part receipt", func(t *testing.T, j *Journal) {
			require.NoError(t, j.Begin(b, putReq(t)))
			require.NoError(t, j.Complete(b, putReq(t), ok201("p")))
		}, join(marker, durable("head-0003.json"), []string{"remove head-0002.json", "syncdir run"}, durable(partB), unmark)},
		{"review", func(t *testing.T, j *Journal) {
			_, err := j.Review(context.Background(), "a.bin", DecisionSkip, "")
			require.NoError(t, err)
		}, join(marker, durable("review-0001.json"), durable("head-0004.json"), []string{"remove head-0003.json", "syncdir run"}, unmark)},
		{"pending review", func(t *testing.T, j *Journal) {
			require.NoError(t, j.Begin(WithUpload(context.Background(), "c.bin"), putReq(t)))
			kill(j) // its worker dies: the lock goes with its open file
			j2, err := Open(j.Dir(), Existing(), withClock(newFakeClock(t0.Add(2e9))), withFS(j.r.(*run).b.Dir.Fs), WithPlan(plan3))
			require.NoError(t, err)
			_, err = j2.ReviewPending(context.Background(), "killed", 0)
			require.NoError(t, err)
		}, join(marker, durable("head-0005.json"), []string{"remove head-0004.json", "syncdir run"}, durable("review-0002.json"), unmark)},
	}
	ff := newFaultFS()
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, withClock(newFakeClock(t0)), withFS(ff), WithPlan(plan3))
	require.NoError(t, err)
	assert.Equal(t, join([]string{"mkdir run", "syncdir " + filepath.Base(filepath.Dir(dir))}, durable("plan.json"), durable("run.json")), ff.ops,
		"a new run: the directory durable in its parent, then plan.json, then the manifest")
	j.r.(*run).clock = newFakeClock(t0.Add(2e9))
	for _, st := range steps {
		ff.ops = nil
		st.run(t, j)
		assert.Equal(t, st.want, ff.ops, st.name)
	}
}
