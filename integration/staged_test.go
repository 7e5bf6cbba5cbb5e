package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// The staged upload of docs/policy.md: parts-are-not-acks, end to end: azblob's StageBlock × 3 and
// CommitBlockList through the fakeserver proxy to Azurite, with a journal
// attached. Each block is a part (journal.WithUploadPart); only the
// commit (journal.WithUpload) can be the file's ACK.

const stagedName = "big.bin"

var stagedPlan = []journal.PlannedFile{{ID: stagedName}}

// stagedBlocks are the blocks of big.bin: three of 4 KiB.
var stagedBlocks = func() [][]byte {
	var out [][]byte
	for i := range 3 {
		out = append(out, bytes.Repeat([]byte{byte('a' + i)}, 4096))
	}
	return out
}()

func blockID(i int) string {
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("block-%04d", i)))
}

// invocation is one run of the uploader: a Journal opened on the run
// directory, a Budget, and a block blob client through the proxy.
type invocation struct {
	j     *journal.Journal
	b     *readrecovery.Budget
	bb    *blockblob.Client
	tries *atomic.Int32
}

func newInvocation(t *testing.T, r *rig, dir string) *invocation {
	t.Helper()
	j, err := journal.Open(dir, journal.WithPlan(stagedPlan))
	if err != nil {
		t.Fatalf("open the journal: %v", err)
	}
	var tries atomic.Int32
	c := r.client(rrOptions(nil, &tries))
	return &invocation{
		j:     j,
		b:     readrecovery.NewBudget("upload " + stagedName),
		bb:    c.ServiceClient().NewContainerClient(r.container).NewBlockBlobClient(stagedName),
		tries: &tries,
	}
}

func (v *invocation) ctx() context.Context {
	return readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), v.b), v.j)
}

// stage sends block i as a part of big.bin's upload.
func (v *invocation) stage(i int) error {
	_, err := v.bb.StageBlock(journal.WithUploadPart(v.ctx(), stagedName), blockID(i),
		streaming.NopCloser(bytes.NewReader(stagedBlocks[i])), nil)
	return err
}

// commit sends the block list: the request whose 2xx is big.bin's ACK.
func (v *invocation) commit() error {
	ids := make([]string, len(stagedBlocks))
	for i := range ids {
		ids[i] = blockID(i)
	}
	_, err := v.bb.CommitBlockList(journal.WithUpload(v.ctx(), stagedName), ids, nil)
	return err
}

// planOf is what the next invocation's continuation says of big.bin.
func planOf(t *testing.T, dir string) (journal.Status, journal.FileDecision) {
	t.Helper()
	j, err := journal.Open(dir, journal.Existing())
	if err != nil {
		t.Fatalf("reopen the journal: %v", err)
	}
	now := time.Now()
	c, err := j.PlanContinuation(stagedPlan, journal.NewApproval, now)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return c.Status, c.Files[0]
}

// ledgerLine is one request the proxy saw, as the test asserts it.
func ledgerLines(r *rig) []string {
	var out []string
	for _, q := range r.ledger() {
		out = append(out, fmt.Sprintf("%s %s %s %d", q.Method, strings.TrimPrefix(q.Path, r.prefix()), strings.Join(q.QueryKeys, ","), q.Status))
	}
	return out
}

func requireLedger(t *testing.T, r *rig, want []string) {
	t.Helper()
	got := ledgerLines(r)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the proxy saw:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	t.Logf("ledger:\n  %s", strings.Join(got, "\n  "))
}

const (
	blockOK  = "PUT big.bin blockid,comp 201"
	block429 = "PUT big.bin blockid,comp 429"
	listOK   = "PUT big.bin comp 201"
	list429  = "PUT big.bin comp 429"
)

// requireUnknown asserts parts-are-not-acks's verdict on a staged upload without its
// committed ACK: unknown, never acked, never sent again without a review.
func requireUnknown(t *testing.T, dir string) journal.Status {
	t.Helper()
	st, f := planOf(t, dir)
	if f.State != journal.FileUnknown || f.Upload {
		t.Fatalf("plan of %s: %+v, want unknown and not uploaded (parts-are-not-acks: parts are never the ACK)", stagedName, f)
	}
	t.Logf("plan: %s %s: %s", f.State, f.Digest, f.Reason)
	return st
}

func requireBlobAbsent(t *testing.T, r *rig) {
	t.Helper()
	if _, err := download(context.Background(), r.direct, r.container, stagedName); err == nil {
		t.Fatalf("%s exists in Azurite: it was never committed", stagedName)
	}
}

func TestStagedUploadJournaled(t *testing.T) {
	az := startAzurite(t)

	t.Run("429 on a middle block", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		dir := filepath.Join(t.TempDir(), "run")
		r.script.Add(fakeserver.RouteBlobPut, throttle1s, fakeserver.MatchPath(r.blobPath(stagedName)), fakeserver.Nth(2))

		v := newInvocation(t, r, dir)
		if err := v.stage(0); err != nil {
			t.Fatalf("block 0: %v", err)
		}
		err := v.stage(1)
		if re := responseError(t, err); re.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("block 1: status %d, want the 429 handed back", re.StatusCode)
		}
		if n := v.tries.Load(); n != 2 {
			t.Fatalf("azcore made %d tries for two blocks, want 2 (one-owner-per-429: no SDK retry of a throttled PUT)", n)
		}
		// The uploader gives up here: the file has a part and a 429, no ACK.
		requireLedger(t, r, []string{blockOK, block429})
		st := requireUnknown(t, dir)
		if st.State != journal.Waiting && st.State != journal.Elapsed || st.ServerDelaySeconds != 1 {
			t.Fatalf("status %+v, want the block's 1 s restriction", st)
		}
		requireBlobAbsent(t, r)
		if saw := r.azuriteSaw(); count(saw, http.MethodPut, r.blobPath(stagedName)) != 1 {
			t.Fatalf("Azurite saw %+v, want the one staged block", saw)
		}

		// The next invocation, after the restriction: a replay of the
		// unknown file is refused before the network (refusal-says-what-it-is: replay-refused).
		waitElapsed(t, dir)
		next := newInvocation(t, r, dir)
		err = next.stage(0)
		var se *readrecovery.StopError
		if !errors.As(err, &se) || !errors.Is(err, readrecovery.ErrReplayRefused) || se.Reason != readrecovery.StopReplayRefused {
			t.Fatalf("replay of an unknown file: %v, want a replay-refused stop (refusal-says-what-it-is)", err)
		}
		requireLedger(t, r, []string{blockOK, block429})

		// The operator's way out: a review, then a new approval uploads the
		// whole file again, and the commit's 201 is the ACK.
		if _, err := next.j.Review(context.Background(), stagedName, journal.DecisionReupload, "blocks never committed; re-stage all"); err != nil {
			t.Fatalf("review: %v", err)
		}
		if _, f := planOf(t, dir); f.State != journal.FileReviewed || !f.Upload {
			t.Fatalf("after the review: %+v, want reviewed and eligible", f)
		}
		again := newInvocation(t, r, dir)
		for i := range stagedBlocks {
			if err := again.stage(i); err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
		}
		if err := again.commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		requireLedger(t, r, []string{blockOK, block429, blockOK, blockOK, blockOK, listOK})
		if _, f := planOf(t, dir); f.State != journal.FileAcked {
			t.Fatalf("after the commit: %+v, want acked", f)
		}
		got, err := download(context.Background(), r.direct, r.container, stagedName)
		if err != nil || !bytes.Equal(got, bytes.Join(stagedBlocks, nil)) {
			t.Fatalf("the committed blob: %d bytes, %v", len(got), err)
		}
		r.proxy.AssertNoMutationSentTwice(t, fakeserver.AllowResend(fakeserver.RouteBlobPut, 1))
		sum, err := journal.InspectStore(context.Background(), journal.DirStore(dir))
		if err != nil || len(sum.Findings) != 0 {
			t.Fatalf("verify: %v %v", sum.Findings, err)
		}
	})

	t.Run("overlong 429 on the commit", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, az)
		dir := filepath.Join(t.TempDir(), "run")
		r.script.Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterOverlong(60*time.Second)),
			fakeserver.MatchPath(r.blobPath(stagedName)), fakeserver.Nth(4))

		v := newInvocation(t, r, dir)
		for i := range stagedBlocks {
			if err := v.stage(i); err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
		}
		if _, f := planOf(t, dir); f.State != journal.FileUnknown {
			t.Fatalf("three staged blocks: %+v, want unknown (parts-are-not-acks: a block's 201 is not the ACK)", f)
		}
		err := v.commit()
		if re := responseError(t, err); re.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("commit: status %d, want the 429 handed back", re.StatusCode)
		}
		if rep := v.b.Report(); rep.Stop != readrecovery.StopOverlong || rep.Waits != 0 {
			t.Fatalf("report %+v, want an overlong stop without a wait", rep)
		}
		requireLedger(t, r, []string{blockOK, blockOK, blockOK, list429})
		st := requireUnknown(t, dir)
		if st.State != journal.Waiting || st.ServerDelaySeconds != 60 || st.RemainingSeconds < 55 {
			t.Fatalf("status %+v, want waiting on the commit's 60 s (not-before-survives)", st)
		}
		requireBlobAbsent(t, r)
		saw := r.azuriteSaw()
		if n := count(saw, http.MethodPut, r.blobPath(stagedName)); n != 3 {
			t.Fatalf("Azurite saw %d PUTs (%+v), want the three blocks and no block list", n, saw)
		}

		// The next invocation is blocked before any network access, even
		// for a read.
		next := newInvocation(t, r, dir)
		_, err = next.bb.GetProperties(next.ctx(), nil)
		var se *readrecovery.StopError
		if !errors.As(err, &se) || se.Reason != readrecovery.StopJournalRestricted {
			t.Fatalf("next invocation: %v, want journal-restricted", err)
		}
		requireLedger(t, r, []string{blockOK, blockOK, blockOK, list429})
	})
}

// waitElapsed waits (at most a few seconds of real time) until the run's
// status allows requests again.
func waitElapsed(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := planOf(t, dir)
		if st.Allows() {
			return
		}
		if time.Now().After(deadline) || st.State != journal.Waiting {
			t.Fatalf("status %+v, want elapsed", st)
		}
		time.Sleep(time.Duration(st.RemainingSeconds) * time.Second / 2)
	}
}
