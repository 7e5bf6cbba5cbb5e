package journal

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/readrecovery/readrecovery/journal/internal/record"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dead-claim-heals (R110) while another worker heals the claim: worker A
// is handed a file and dies before its upload; between worker B's
// liveness probe of A's shard marker and B's read of it, worker C removes
// the dead claim and claims the file anew (a live marker, a new version).
// A dead claim blocks nothing and neither does a live one, so B's upload
// of a file of another shard goes. Today it is refused: the scan keeps the
// probe's "no hold" (runread's ScanRun drops the version b.Live returns),
// judges the bytes it then reads (C's live CLAIM) by it, and unsent's
// full rescan, which finds C's marker live, says "not unsent": the marker
// counts as a dead worker's unfinished request, and the run is unresolved
// ("unfinished request: its worker died in flight"). Seen in issue 38's
// kill trials (TestKillTrialsBeforeUpload, TestBlobKillTrialsBeforeUpload:
// 0–4 refused uploads and a 'Next waits' warning per 10 kills). Skipped
// until the journal is fixed (RR_KNOWN_BUGS=1 runs it).
func TestDeadClaimJudgedWithItsOwnProbe(t *testing.T) {
	if os.Getenv("RR_KNOWN_BUGS") == "" {
		t.Skip("a known journal bug: a claim healed between a scan's liveness probe and its read counts as dead (RR_KNOWN_BUGS=1 runs it)")
	}
	plan := manyFiles(40)
	for _, kind := range []string{"mem", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			r := newShardedRun(t, kind)
			open := func() *Journal {
				j, err := OpenStore(context.Background(), r.st, WithPlan(plan), WithParallel(4))
				require.NoError(t, err)
				return j
			}
			b, a := open(), open()
			fa, err := a.Next(context.Background(), NewApproval)
			require.NoError(t, err)
			k := a.Shard(fa.ID)
			kill(a)
			name := record.ShardName(k) + "/" + record.MarkerName
			healed := false
			r.mem.fail = func(op, n string) error {
				// Under the store's lock, at B's read of the marker: C's
				// removal of the dead claim and its new claim of the same
				// file (a new version, live; here even the same bytes).
				if op == "read" && (n == name || n == "p/"+name) && !healed {
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
			err = b.Begin(WithUpload(context.Background(), g), putReq(t))
			r.mem.fail = nil
			require.True(t, healed, "B read shard %d's marker", k)
			assert.NoError(t, err, "B's upload of %s (shard %d) while shard %d's dead claim was healed", g, b.Shard(g), k)
		})
	}
}
