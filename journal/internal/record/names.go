package record

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The bounds of a parallel run's shard count.
const (
	MinParallel = 2
	MaxParallel = 16 // the most shards (requests in flight at once) of a run
)

// fileKind is the one description of a kind of file a run holds (docs/policy.md:
// "The run's files"): the scan, Inspect, isJournalName and the run's sequence read it.
type FileKind struct {
	Kind, Prefix string // the envelope's kind; "" for run.json and plan.json, named prefix
	MaxN         int    // the bound of a numbered kind's number (0: not numbered)
	MaxBytes     int64  // the size cap (0: maxRecordBytes)
	// attempted returns the hex prefix of the file whose attempt a file of the kind records,
	// so that one failing verification leaves its file unknown; nil when it names no file.
	Attempted func(name string) string
	body      func() any // an empty body of a record kind (unseal)
}

// record reports whether the kind's files are records of the run's sequence (not a head).
func (k *FileKind) Record() bool { return k.Kind != "" && k.Kind != KindHead }

// fileKinds is the table, in the order of the scan: each kind is checked
// against the kinds before it. (Set in init: attempted parses names through it.)
var FileKinds []*FileKind

func init() {
	FileKinds = []*FileKind{
		{Prefix: ManifestName, MaxBytes: maxManifestBytes},
		{Prefix: PlanName, MaxBytes: MaxPlanBytes},
		{Kind: KindEntry, Prefix: "backoff-", MaxN: MaxEntries, body: newBody[EntryBody]},
		{Kind: KindReceipt, Prefix: "receipt-", Attempted: hexOf, body: newBody[ReceiptBody]},
		{Kind: KindPart, Prefix: "part-", Attempted: hexOf, body: newBody[PartBody]},
		{Kind: KindReview, Prefix: "review-", MaxN: MaxReviews, body: newBody[ReviewBody]},
		{Kind: KindHead, Prefix: "head-", MaxN: maxRunSeq, body: newBody[HeadBody]},
	}
}

func newBody[B any]() any { return new(B) }

func hexOf(name string) string {
	_, _, h := ParseName(name)
	return h
}

// kindOf returns the kind of a name and its number, or nil.
func KindOf(name string) (*FileKind, int) {
	for _, k := range FileKinds[:2] {
		if name == k.Prefix {
			return k, 0
		}
	}
	k, n, _ := ParseName(name)
	return k, n
}

// isRecordName reports whether name is a record of the run's sequence.
func IsRecordName(name string) bool {
	k, _ := KindOf(name)
	return k != nil && k.Record()
}

// shardName is the name of shard k (1-based) inside its root.
func ShardName(k int) string { return fmt.Sprintf("shard-%02d", k) }

// parseShardName returns k for "shard-KK" (two digits, 1 to maxParallel).
func ParseShardName(name string) (int, bool) {
	k, err := strconv.Atoi(strings.TrimPrefix(name, "shard-"))
	if err != nil || k < 1 || k > MaxParallel || ShardName(k) != name {
		return 0, false
	}
	return k, true
}

// parseShardRef splits "shard-KK/name" into k and name.
func ParseShardRef(ref string) (int, string, bool) {
	sh, name, ok := strings.Cut(ref, "/")
	k, isShard := ParseShardName(sh)
	return k, name, ok && isShard
}

// inShard names a shard's file by its place in the root ("" stays "").
func InShard(k int, name string) string {
	if name == "" {
		return ""
	}
	return ShardName(k) + "/" + name
}

func MarkerRef(k int) string { return InShard(k, MarkerName) }

// shardIndex maps a file identity (or URL) digest to its shard, 1 to n
// (docs/policy.md: parallel-shards); a digest not sha256 maps to shard 1.
func ShardIndex(digest string, n int) int {
	h := strings.TrimPrefix(digest, "sha256:")
	if b, err := hex.DecodeString(h[:min(len(h), 16)]); err == nil && len(b) == 8 {
		return int(binary.BigEndian.Uint64(b)%uint64(n)) + 1
	}
	return 1
}

// shardPlan returns the digests of the sorted plan that map to shard k.
func ShardPlan(plan []string, k, n int) []string {
	if plan == nil {
		return nil
	}
	out := []string{}
	for _, d := range plan {
		if ShardIndex(d, n) == k {
			out = append(out, d)
		}
	}
	return out
}

// planDigestOf is digestOfPlan of sorted file digests (never nil: its callers
// pass digestOfPlan's and shardPlan's lists, made non-nil).
func PlanDigestOf(sorted []string) string {
	b, _ := json.Marshal(planFile{sorted}) // plan.json's bytes without the newline
	return DigestOf(b)
}

// Decision is an operator's decision about an unknown file (docs/policy.md: operator-review).
type Decision string

// The two decisions.
const (
	// DecisionReupload makes the file eligible again as a never-attempted
	// one: it is sent only under a new approval and while the status
	// allows uploads. Its next upload is a new round with its own records.
	DecisionReupload Decision = "reupload"
	// DecisionSkip means the file is never sent by this run.
	DecisionSkip Decision = "skip"
	// decisionPending is a pending review's ([Journal.ReviewPending]): its
	// marker blocks no more, its file is unknown, and the run waits.
	DecisionPending Decision = "pending"
	// decisionRestriction is a restriction review's ([Journal.ReviewRestriction]).
	DecisionRestriction Decision = "restriction"
)
