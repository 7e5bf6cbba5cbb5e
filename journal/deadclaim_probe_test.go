package journal

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dead-claim-heals (R110) while another worker heals the claim: worker A
// is handed a file and dies before its upload; between worker B's
// liveness probe of A's shard marker and B's read of it, worker C removes
// the dead claim and claims the file anew (a live marker, a new version).
// A dead claim blocks nothing and neither does a live one, so B's upload
// of a file of another shard goes. (It was refused: the scan kept the
// probe's "no hold", judged the bytes it then read, C's live CLAIM, by it,
// and unsent's full rescan, which found C's marker live, said "not
// unsent": the marker counted as a dead worker's unfinished request, and
// the run was unresolved. Seen in issue 38's kill trials: 0–4 refused
// uploads and a 'Next waits' warning per 10 kills.) A dead marker's bytes
// read under another version than the probe's are judged by a probe after
// the read.
func TestDeadClaimJudgedWithItsOwnProbe(t *testing.T) {
	plan := manyFiles(40)
	// at: the read of the marker at which C heals it: B's light scan's
	// (1), or the scan of the whole shard that asks whether the dead
	// claim's upload began (2), which then finds C's live claim.
	for _, tc := range []struct {
		kind string
		at   int
	}{{"mem", 1}, {"mem+prefix", 1}, {"mem", 2}, {"mem+prefix", 2}} {
		kind := tc.kind
		t.Run(fmt.Sprintf("%s/read %d", kind, tc.at), func(t *testing.T) {
			r := newShardedRun(t, kind)
			b, fa, name := deadClaim(t, r, plan)
			k := b.Shard(fa.ID)
			healed, reads := false, 0
			r.mem.fail = func(op, n string) error {
				// Under the store's lock, at B's read of the marker: C's
				// removal of the dead claim and its new claim of the same
				// file (a new version, live; here even the same bytes).
				if op == "read" && (n == name || n == "p/"+name) {
					reads++
				}
				if op == "read" && (n == name || n == "p/"+name) && !healed && reads == tc.at {
					r.mem.n++
					v := fmt.Sprintf(`"v%d"`, r.mem.n)
					r.mem.vers[n], r.mem.held[n] = v, v
					healed = true
				}
				return nil
			}
			var g string
			for _, p := range plan {
				if b.Shard(p.ID) != k {
					g = p.ID
					break
				}
			}
			err := b.Begin(WithUpload(context.Background(), g), putReq(t))
			r.mem.fail = nil
			require.True(t, healed, "B read shard %d's marker", k)
			assert.NoError(t, err, "B's upload of %s (shard %d) while shard %d's dead claim was healed", g, b.Shard(g), k)
		})
	}
}

// dead-claim-heals, the same race when the healer has not claimed again:
// worker A is handed a file and dies before its upload; worker B's scan of
// A's shard lists the marker and probes it dead (Blob: its lease expired),
// and worker C removes the dead claim before B reads it. B has a marker
// listed, "no hold" from its probe, and no bytes: it judged that a dead
// worker's request in flight, and Next waited (dead-upload-waits, logged
// once) for a run nothing had left unresolved. Seen in issue 38's Blob
// kill trials: 1–2 'Next waits' lines in 3 of 4 runs of 4 kills before the
// upload. A marker the scan cannot read after a "no hold" probe is judged
// by a probe after the read: gone, it is busy at most, never dead.
//
// Each step is what C has done at B's read of the marker; B's Next, the
// only worker left with files in that shard, decides.
func TestDeadClaimHealedBetweenProbeAndRead(t *testing.T) {
	all := manyFiles(40)
	var plan []PlannedFile // every file in one shard: B's Next has to judge it
	for _, f := range all {
		if record.ShardIndex(f.Digest(), 4) == record.ShardIndex(all[0].Digest(), 4) {
			plan = append(plan, f)
		}
	}
	for _, kind := range []string{"mem", "mem+prefix"} {
		for _, tc := range []struct {
			step   string // C's, at B's read of the marker
			handed bool   // B's Next hands out a file (else the shard stays busy)
		}{
			{"nothing (B heals)", true},
			{"removed the dead claim", true},
			{"removed it and claimed again (live)", false},
		} {
			t.Run(kind+"/"+tc.step, func(t *testing.T) {
				logs := &lockedBuffer{}
				old := slog.Default()
				slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
				t.Cleanup(func() { slog.SetDefault(old) })
				r := newShardedRun(t, kind)
				b, fa, name := deadClaim(t, r, plan)
				stepped := false
				r.mem.fail = func(op, n string) error { // under the store's lock
					if op != "read" || n != name && n != "p/"+name || stepped {
						return nil
					}
					stepped = true
					switch tc.step {
					case "removed the dead claim":
						delete(r.mem.objs, n)
						delete(r.mem.vers, n)
					case "removed it and claimed again (live)":
						r.mem.n++
						v := fmt.Sprintf(`"v%d"`, r.mem.n)
						r.mem.vers[n], r.mem.held[n] = v, v
					}
					return nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				f, err := b.Next(ctx, NewApproval)
				r.mem.fail = nil
				require.True(t, stepped, "B read the marker")
				assert.NotContains(t, logs.String(), "Next waits", "no dead worker's request was ever in flight")
				assert.NotErrorIs(t, err, ErrPending, "B waited out no unresolved run")
				if tc.handed {
					require.NoError(t, err)
					assert.Equal(t, fa.ID, f.ID, "the killed claim's file, handed out again")
				} else {
					assert.ErrorIs(t, err, context.DeadlineExceeded, "busy while C's claim holds")
				}
			})
		}
	}
}

// deadClaim opens two Journals, B and A, on r's run of plan (parallel 4);
// A's Next claims a file and A is killed. It returns B, A's claimed file
// and the name of its shard's marker.
func deadClaim(t *testing.T, r *shardedRun, plan []PlannedFile) (*Journal, PlannedFile, string) {
	t.Helper()
	open := func() *Journal {
		j, err := OpenStore(context.Background(), r.st, WithPlan(plan), WithParallel(4))
		require.NoError(t, err)
		return j
	}
	b, a := open(), open()
	fa, err := a.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	kill(a)
	return b, fa, record.ShardName(a.Shard(fa.ID)) + "/" + record.MarkerName
}
