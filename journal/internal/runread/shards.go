package runread

import (
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/record"
	"github.com/readrecovery/readrecovery/journal/internal/store"
)

// shardWants are the plan digests of each shard's part of the root plan
// ("" each without plan.json): what its manifest must record.
func ShardWants(plan []string, n int) []string {
	out := make([]string, n)
	for k := 1; plan != nil && k <= n; k++ {
		out[k-1] = record.PlanDigestOf(record.ShardPlan(plan, k, n))
	}
	return out
}

// scanShard scans shard k of rb once no run lies inside it. A shard that
// cannot be read (deleted, or not finished) is a snapshot of one finding.
func ScanShard(rb *store.Loc, k int, now time.Time) (s *Snapshot, unread string, err error) {
	b := rb.Shard(k)
	if err := b.Nested(); err != nil {
		return nil, "", err
	}
	if s, err = ScanRun(b, nil, now); err != nil {
		unread = "cannot read the shard: " + redact.Text(store.BareErr(err).Error())
		s = NewSnapshot()
		s.AddFinding(".", "%s", unread)
	}
	return s, unread, nil
}

// shardProblem says what makes shard snapshot s's manifest no shard of its
// root, which gives it plan digest want ("" for none); "" when nothing.
func ShardProblem(s *Snapshot, want string) string {
	switch {
	case s.Manifest != nil && s.Manifest.Parallel != 0:
		return "declares shards of its own (a root copied into a shard)"
	case want != "" && s.Manifest != nil && s.Manifest.PlanDigest != want:
		return "plan_digest is not this shard's part of the root plan (a shard of another run)"
	}
	return ""
}

// rootParallel is the shard count b's manifest declares (0: none, or unreadable).
func RootParallel(b *store.Loc) int {
	data, _, ok := b.Read(nil, record.ManifestName, record.MaxRecordBytes)
	if !ok {
		return 0
	}
	mi, err := record.ParseManifest(data)
	if err != nil {
		return 0
	}
	return mi.Parallel
}

// shardReason names shard k in a reason: "shard-02/backoff-0003.json: …"
// for a reason that starts with a name of the shard, else "shard-02: …".
func ShardReason(k int, reason string) string {
	if name, _, ok := strings.Cut(reason, ":"); ok && (name == "." || record.IsJournalName(name) || strings.Contains(name, ".json")) {
		return record.ShardName(k) + "/" + reason
	}
	return record.ShardName(k) + ": " + reason
}

// rootOnly adds a finding for each journal name in a root but its manifest,
// plan and writes in progress: its records live in its shards.
func RootOnly(s *Snapshot) {
	for _, ln := range s.Listed {
		_, temp := record.ParseTempName(ln.Name)
		if !temp && ln.Name != record.ManifestName && ln.Name != record.PlanName && record.IsJournalName(ln.Name) {
			s.AddFinding(ln.Name, "in a parallel run's root: its records live in its shards (not a record of this run)")
		}
	}
}
