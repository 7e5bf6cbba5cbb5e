package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// upload sends one File upload of id through rt under a journal and a
// budget; queue marks it for the queue-429 route.
func upload(t *testing.T, rt http.RoundTripper, j *journal.Journal, b *readrecovery.Budget, id string, queue bool) (*http.Response, error) {
	t.Helper()
	ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), id)
	if queue {
		ctx = readrecovery.WithQueueRetry(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://files.example/files?sig=SECRET", bytes.NewReader([]byte("content of "+id)))
	require.NoError(t, err)
	req.Header.Set("x-ms-file-name", id)
	return rt.RoundTrip(req)
}

// names lists the run directory without its head (head-NNNN.json, the
// journal package's own tests assert it).
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "head-") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// queue-429-route, journal-claim-then-check-queue-429-route: the queue-429 route end to end under a real journal:
// attempt 1 meets 429, its entry is on disk before the wait, attempt 2 is
// sent after exactly the server's delay and its receipt names the event
// digest that allowed it.
func TestTransportQueueRouteJournaled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		plan := []journal.PlannedFile{{ID: "a.csv"}}
		j, err := journal.Open(dir, journal.WithPlan(plan))
		require.NoError(t, err)
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
		b := readrecovery.NewBudget("batch")
		resp, err := upload(t, readrecovery.New(srv.Transport()), j, b, "a.csv", true)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)

		reqs := srv.Requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, 2*time.Second, reqs[1].Arrived.Sub(reqs[0].Arrived))
		assert.Equal(t, reqs[0].BodyDigest, reqs[1].BodyDigest, "the same body")
		srv.AssertNoMutationSentTwice(t, fakeserver.AllowResend(fakeserver.RouteFileUpload, 1))

		files := names(t, dir)
		require.Len(t, files, 4, "%v", files)
		assert.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, []string{files[0], files[1], files[3]})
		assert.Regexp(t, `^receipt-[0-9a-f]{32}\.json$`, files[2])
		for _, f := range files {
			fi, err := os.Stat(filepath.Join(dir, f))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
		}
		envelope := readJSON(t, filepath.Join(dir, "backoff-0001.json"))
		entry := envelope["body"].(map[string]any)
		assert.Equal(t, map[string]any{"kind": "seconds", "value": 2.0}, entry["retry_after"])
		tm := entry["timing"].(map[string]any)
		assert.Equal(t, 2.0, tm["server_delay_seconds"])
		assert.Equal(t, tm["received_at_utc"].(float64)+2, tm["not_before_utc"])
		assert.Equal(t, 1.0, entry["provenance"].(map[string]any)["attempt"])
		receipt := readJSON(t, filepath.Join(dir, files[2]))["body"].(map[string]any)
		assert.Equal(t, true, receipt["ack"])
		assert.Equal(t, 2.0, receipt["attempt"])
		assert.Equal(t, envelope["digest"], receipt["resend_of"], "queue-429-route: the re-send names the event that allowed it")
		raw, _ := os.ReadFile(filepath.Join(dir, "backoff-0001.json"))
		assert.NotContains(t, string(raw), "SECRET")

		r := b.Report()
		assert.Equal(t, readrecovery.Owned, r.Ownership)
		assert.Equal(t, 1, r.Waits)
		assert.Equal(t, journal.Elapsed, j.Status(time.Now()).State)

		c, err := j.PlanContinuation(plan, journal.NewApproval, time.Now())
		require.NoError(t, err)
		assert.Equal(t, journal.FileAcked, c.Files[0].State, "upload-only-continuation: an acked upload is never sent again")
		assert.Empty(t, c.Uploads())
	})
}

// stop-not-shorten, status-before-network, not-before-survives: an overlong 60 s Retry-After stops the operation at once
// (no wait, no re-send) and keeps later invocations blocked — before any
// network access — until its not_before_utc, not for a new 30 s budget;
// then elapsed allows only never-attempted uploads under a new approval.
func TestTransportOverlongBlocksLaterInvocations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		plan := []journal.PlannedFile{{ID: "a.csv"}, {ID: "b.csv"}, {ID: "c.csv"}}
		j, err := journal.Open(dir, journal.WithPlan(plan))
		require.NoError(t, err)
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterOverlong(60*time.Second)), fakeserver.Nth(2))
		rt := readrecovery.New(srv.Transport())

		b := readrecovery.NewBudget("batch 1")
		resp, err := upload(t, rt, j, b, "a.csv", true)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		start := time.Now()
		resp, err = upload(t, rt, j, b, "b.csv", true)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, time.Duration(0), time.Since(start), "no wait")
		assert.Equal(t, readrecovery.StopOverlong, b.Report().Stop)
		assert.Equal(t, 2, srv.Count(fakeserver.RouteFileUpload, http.MethodPost))

		// A later invocation: a new process opens the run.
		time.Sleep(10 * time.Second)
		j2, err := journal.Open(dir, journal.WithPlan(plan))
		require.NoError(t, err)
		st := j2.Status(time.Now())
		assert.Equal(t, journal.Waiting, st.State)
		assert.Equal(t, int64(50), st.RemainingSeconds)
		assert.Equal(t, int64(60), st.ServerDelaySeconds)
		out, err := st.CommandJSON()
		require.NoError(t, err)
		assert.JSONEq(t, `{"file_batch":{"backoff":{"state":"waiting","received_at_utc":946684800,"not_before_utc":946684860,"server_delay_seconds":60,"remaining_seconds":50,"reason":"`+st.Reason+`"},`+
			`"files":{"acked":1,"in-flight":0,"never-attempted":1,"reviewed":0,"unknown":1},`+
			`"shards":[{"shard":".","state":"waiting","marker":"","files":{"acked":1,"in-flight":0,"never-attempted":1,"reviewed":0,"unknown":1}}]}}`, string(out))

		// Blocked before network access: an upload and a verification GET.
		b2 := readrecovery.NewBudget("batch 2")
		_, err = upload(t, rt, j2, b2, "c.csv", false)
		require.ErrorIs(t, err, readrecovery.ErrSequenceStopped)
		require.ErrorIs(t, err, journal.ErrRestricted)
		req, _ := http.NewRequestWithContext(readrecovery.WithJournal(context.Background(), j2), http.MethodGet, "http://files.example/files", nil)
		_, err = rt.RoundTrip(req)
		require.ErrorIs(t, err, journal.ErrRestricted)
		assert.Len(t, srv.Requests(), 2, "a blocked run sends nothing")

		// Fresh approval does not waive the server's delay.
		c, err := j2.PlanContinuation(plan, journal.NewApproval, time.Now())
		require.NoError(t, err)
		assert.Empty(t, c.Uploads())

		// At not_before_utc: elapsed; only the never-attempted file may go.
		time.Sleep(50 * time.Second)
		j3, err := journal.Open(dir, journal.WithPlan(plan))
		require.NoError(t, err)
		assert.Equal(t, journal.Elapsed, j3.Status(time.Now()).State)
		c, err = j3.PlanContinuation(plan, journal.NewApproval, time.Now())
		require.NoError(t, err)
		got := map[string]journal.FileState{}
		for _, f := range c.Files {
			got[f.ID] = f.State
		}
		assert.Equal(t, map[string]journal.FileState{"a.csv": journal.FileAcked, "b.csv": journal.FileUnknown, "c.csv": journal.FileNeverAttempted}, got)
		assert.Equal(t, []string{"c.csv"}, c.Uploads())
		c, err = j3.PlanContinuation(plan, journal.NoNewApproval, time.Now())
		require.NoError(t, err)
		assert.Empty(t, c.Uploads(), "never-attempted files need a new approval")

		resp, err = upload(t, rt, j3, readrecovery.NewBudget("batch 3"), "c.csv", false)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Len(t, srv.Requests(), 3)
	})
}

// status-before-network, crash-never-loses-restriction: a run whose directory vanished under it fails closed: the
// request is refused before any network access, never sent unjournaled.
func TestTransportVanishedRunSendsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.csv"}}))
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir))
	srv := fakeserver.New()
	defer srv.Close()
	b := readrecovery.NewBudget("batch")
	_, err = upload(t, readrecovery.New(srv.Transport()), j, b, "a.csv", true)
	require.ErrorIs(t, err, readrecovery.ErrSequenceStopped)
	require.ErrorIs(t, err, journal.ErrRestricted)
	var se *readrecovery.StopError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, readrecovery.StopJournalRestricted, se.Reason)
	assert.Equal(t, journal.Unresolved, j.Status(time.Now()).State)
	assert.Empty(t, srv.Requests())
}

// wait-before-readback, status-before-network: under a journal, a write 429's wait comes before the readback's
// admission: the verification GET waits the server's delay, then the run's
// status has elapsed and the GET is sent, exactly once.
func TestTransportWrite429ThenJournaledReadback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.csv"}}))
		require.NoError(t, err)
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(3)), fakeserver.Nth(1))
		rt := readrecovery.New(srv.Transport())
		b := readrecovery.NewBudget("batch")
		resp, err := upload(t, rt, j, b, "a.csv", false)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, journal.Waiting, j.Status(time.Now()).State)

		req, _ := http.NewRequestWithContext(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), http.MethodGet, "http://files.example/files", nil)
		resp, err = rt.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		reqs := srv.Requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, 3*time.Second, reqs[1].Arrived.Sub(reqs[0].Arrived))
		r := b.Report()
		assert.Equal(t, 2, r.Requests)
		assert.Equal(t, "write-429", r.WaitLog[0].Trigger)
		assert.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, filter(names(t, dir), "receipt-"))
	})
}

// filter drops the names that start with prefix.
func filter(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if len(n) < len(prefix) || n[:len(prefix)] != prefix {
			out = append(out, n)
		}
	}
	return out
}
