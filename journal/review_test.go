package journal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var osFS = fsys.OS{}

// unknownRun is a run where a.bin's commit met 500 (unknown), b.bin got
// two parts (unknown) and c.bin is acked; it returns a fresh Journal on
// it (a later invocation) at t0.
func unknownRun(t *testing.T) *Journal {
	t.Helper()
	j, _ := newRun(t)
	a := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, j.Complete(a, putReq(t), readrecovery.JournalOutcome{StatusCode: 500, RequestID: "r500"}))
	sendPart(t, j, "b.bin", ok201("b1"))
	sendPart(t, j, "b.bin", ok201("b2"))
	c := WithUpload(context.Background(), "c.bin")
	require.NoError(t, j.Begin(c, putReq(t)))
	require.NoError(t, j.Complete(c, putReq(t), ok201("c")))
	return reopen(t, j.Dir(), t0)
}

// TestReviewIsTheOnlyWayOutOfUnknown: only an unknown file can be
// reviewed; reupload makes it eligible under a new approval, and its next
// upload is a new round with its own receipt; skip means never sent. A
// review never makes a file acked.
func TestReviewIsTheOnlyWayOutOfUnknown(t *testing.T) {
	j := unknownRun(t)
	ctx := context.Background()
	for _, id := range []string{"c.bin", "zzz"} {
		_, err := j.Review(ctx, id, DecisionReupload, "")
		require.ErrorIs(t, err, errReviewRefused, id)
	}
	_, err := j.Review(ctx, "a.bin", Decision("approve"), "")
	require.ErrorIs(t, err, errReviewRefused)
	err = j.Begin(WithUpload(ctx, "a.bin"), putReq(t))
	require.ErrorIs(t, err, errReplay, "unknown is never replayed before a review")

	rec, err := j.Review(ctx, "a.bin", DecisionReupload, "checked the share:\n\x1b[31mblob absent https://u:p@h/x?sig=SECRET")
	require.NoError(t, err)
	assert.Equal(t, "review-0001.json", rec.Name)
	assert.Equal(t, DecisionReupload, rec.Decision)
	assert.Equal(t, osUser(), rec.Reviewer)
	assert.NotEmpty(t, rec.Reviewer)
	assert.Equal(t, t0.Unix(), rec.ReviewedAtUTC)
	assert.Equal(t, "checked the share: [31mblob absent https://h/x", rec.Note, "sanitized: no control character, query or userinfo")
	raw, err := os.ReadFile(filepath.Join(j.Dir(), "review-0001.json"))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "SECRET")
	assert.NotContains(t, string(raw), "\x1b")
	requirePrivate(t, j.Dir())

	// The other unknown file, by its digest as `journal plan` prints it.
	rec2, err := j.Review(ctx, record.FileDigest("b.bin"), DecisionSkip, "parts only; skip")
	require.NoError(t, err)
	review1 := readJSONFile(t, filepath.Join(j.Dir(), "review-0001.json"))
	review2 := readJSONFile(t, filepath.Join(j.Dir(), "review-0002.json"))
	assert.Equal(t, "review-0001.json", review2["prev"].(map[string]any)["name"], "reviews are in the run's one chain")
	assert.Equal(t, review1["digest"], review2["prev"].(map[string]any)["digest"])
	assert.Len(t, review2, 5, "one envelope (seq, kind, prev, body, digest): no second chain beside the run's")
	assert.Equal(t, rec2.Digest, review2["digest"])
	assert.Equal(t, 2.0, review2["body"].(map[string]any)["evidence"].(map[string]any)["parts"])

	_, err = j.Review(ctx, "a.bin", DecisionSkip, "again")
	require.ErrorIs(t, err, errReviewRefused, "a reviewed file is no longer unknown")

	c, err := j.PlanContinuation(plan3, NoNewApproval, t0)
	require.NoError(t, err)
	require.Equal(t, []FileState{FileReviewed, FileReviewed, FileAcked}, states(c))
	assert.Equal(t, []Decision{DecisionReupload, DecisionSkip, ""}, []Decision{c.Files[0].Decision, c.Files[1].Decision, c.Files[2].Decision})
	assert.Empty(t, c.Uploads(), "a new approval is still needed")
	c, err = j.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.bin"}, c.Uploads(), "reupload is eligible; skip never is")

	err = j.Begin(WithUploadPart(ctx, "b.bin"), putReq(t))
	require.ErrorIs(t, err, errReplay, "skip: never sent")

	// The reupload is round 2: its commit gets its own receipt.
	a := WithUpload(ctx, "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, j.Complete(a, putReq(t), ok201("a2")))
	r2 := record.ReceiptNameRound(record.FileDigest("a.bin"), 2)
	assert.Equal(t, "receipt-"+record.FileHex(record.FileDigest("a.bin"))+"-r02.json", r2)
	assert.Equal(t, 2.0, readBody(t, filepath.Join(j.Dir(), r2))["round"])
	c, err = j.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	require.Equal(t, []FileState{FileAcked, FileReviewed, FileAcked}, states(c))
	findings, err := verify(j.Dir())
	require.NoError(t, err)
	require.Empty(t, findings)
}

// TestReviewNeedsAClaim: a review claims the marker like a request: a
// pending marker of another request refuses it, and a waiting run can be
// reviewed (a review sends nothing) but stays waiting.
func TestReviewNeedsAClaim(t *testing.T) {
	j := unknownRun(t)
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir(), record.MarkerName), []byte("{}"), 0o600))
	_, err := j.Review(context.Background(), "a.bin", DecisionSkip, "")
	require.ErrorIs(t, err, ErrPending)
	require.NoError(t, os.Remove(filepath.Join(j.Dir(), record.MarkerName)))

	w := unknownRun(t)
	record429(t, w, context.Background(), getReq(t), secs(30), timing(t0, 30))
	_, err = w.Review(context.Background(), "a.bin", DecisionReupload, "")
	require.NoError(t, err)
	st := w.Status(t0.Add(time.Second))
	require.Equal(t, Waiting, st.State, "a review never waives a restriction")
}

// TestVerifyChecksReviews: an edited, removed or reordered review, and
// a forged one — of an acked file, of a never-attempted file — is a
// finding, and a forged review never takes a file out of acked or unknown.
func TestVerifyChecksReviews(t *testing.T) {
	base := unknownRun(t)
	_, err := base.Review(context.Background(), "a.bin", DecisionReupload, "one")
	require.NoError(t, err)
	_, err = base.Review(context.Background(), "b.bin", DecisionSkip, "two")
	require.NoError(t, err)
	_, pd, _ := digestOfPlan(plan3)
	forge := func(t *testing.T, dir, file string, ev record.ReviewEvidence) {
		s, err := scan(osFS, dir, nil)
		require.NoError(t, err)
		seq, prev := s.NextLink()
		data, _, err := record.Seal(record.KindReview, seq, prev, &record.ReviewBody{Sequence: 3, PlanDigest: pd,
			FileDigest: record.FileDigest(file), Decision: DecisionReupload,
			Reviewer: "mallory", ReviewedAtUTC: t0.Unix(), Note: "forged", Evidence: ev})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "review-0003.json"), data, 0o600))
	}
	cases := []struct {
		name    string
		tamper  func(t *testing.T, dir string)
		finding string
		file    string
		state   FileState
	}{
		{"edited", func(t *testing.T, dir string) { editByte(t, filepath.Join(dir, "review-0001.json"), 300) }, "review-0001.json", "a.bin", FileUnknown},
		{"removed first", func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "review-0001.json"))) }, "review-0002.json: numbering not contiguous", "a.bin", FileUnknown},
		{"swapped", func(t *testing.T, dir string) {
			p1, p2 := filepath.Join(dir, "review-0001.json"), filepath.Join(dir, "review-0002.json")
			b1, _ := os.ReadFile(p1)
			b2, _ := os.ReadFile(p2)
			require.NoError(t, os.WriteFile(p1, b2, 0o600))
			require.NoError(t, os.WriteFile(p2, b1, 0o600))
		}, "review-0001.json: its content names review-0002.json (renamed)", "", ""},
		{"forged acked", func(t *testing.T, dir string) {
			s, _ := scan(osFS, dir, nil)
			forge(t, dir, "c.bin", s.Evidence(record.FileDigest("c.bin")))
		}, "review-0003.json: reviews an acked file", "c.bin", FileAcked},
		{"forged never-attempted", func(t *testing.T, dir string) {
			// Round 2 of a.bin has no record: the file is not unknown.
			s, _ := scan(osFS, dir, nil)
			forge(t, dir, "a.bin", s.Evidence(record.FileDigest("a.bin")))
		}, "review-0003.json: reviews a file that was not unknown", "a.bin", FileReviewed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			copyDir(t, base.Dir(), dir)
			tc.tamper(t, dir)
			findings, err := verify(dir)
			require.NoError(t, err)
			require.NotEmpty(t, findings)
			var lines []string
			for _, f := range findings {
				lines = append(lines, f.String())
			}
			require.Contains(t, strings.Join(lines, "\n"), tc.finding)
			j := reopen(t, dir, t0)
			require.Equal(t, Unresolved, j.Status(t0).State)
			if tc.file != "" {
				c, err := j.PlanContinuation(plan3, NewApproval, t0)
				require.NoError(t, err)
				for _, f := range c.Files {
					if f.ID == tc.file {
						require.Equal(t, tc.state, f.State)
					}
				}
				assert.Empty(t, c.Uploads(), "an unresolved run sends nothing")
			}
		})
	}
}
