// Package record is the journal's record envelope: the names of a run's files and their
// kinds, the envelope every record shares (seal, unseal: one digest chain), the bodies by
// kind, the manifest and plan files, and the checks of a record's own fields. It reads and
// writes bytes only; where they are kept is package store's.
package record

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// The names, limits (bounded-journal) and format version (private-run-directory) of a run.
const (
	BackoffVersion = "1.0" // of a new run's manifest and of every backoff entry
	MaxEntries     = 200   // backoff-0001.json to backoff-0200.json
	MaxFiles       = 1003  // names at every instant, a write's temporary file included
	// Footprint is the most names one journaled request adds at its peak: marker, head and its
	// temporary file, record (the replaced head is removed once the new one is durable).
	Footprint = 4

	ManifestName  = "run.json"
	PlanName      = "plan.json"
	MarkerName    = "pending-request.json"
	TempInfix     = ".tmp-" // tempName's
	TempHexLen    = 16
	jsonSuffix    = ".json"
	receiptHexLen = 32 // hex digits of the file identity digest naming a receipt or part (128 bits)
	digestPrefix  = "sha256:"

	// Size caps, checked before a file is read; plan.json holds about 13,000 planned files.
	maxManifestBytes = 64 << 10
	MaxRecordBytes   = 4 << 10
	MaxPlanBytes     = 1 << 20

	// Numbering limits (the file limit bounds them first): part receipts per file, reviews
	// per run, upload rounds per file (1 plus its reupload reviews), the run's seq (which
	// bounds parts and reviews too: each is a record of the sequence).
	MaxParts   = 9999
	MaxReviews = 9999
	maxRounds  = 99
	MaxRunSeq  = 9999

	PendingWaitSeconds = 30  // the least a pending or restriction review makes the run wait (the wait ceiling)
	MaxNoteBytes       = 256 // bounds of a review's free text
	MaxReviewerBytes   = 64

	// The kinds of records.
	KindEntry   = "backoff"
	KindReceipt = "receipt"
	KindPart    = "part"
	KindReview  = "review"
	KindHead    = "head"
)

func EntryName(n int) string  { return fmt.Sprintf("backoff-%04d.json", n) }
func ReviewName(n int) string { return fmt.Sprintf("review-%04d.json", n) }
func HeadName(n int) string   { return fmt.Sprintf("head-%04d.json", n) }

// ReceiptNameRound names a file's commit receipt of a round: receipt-<hex>[-rNN].json (NN ≥ 2).
func ReceiptNameRound(fileDigest string, round int) string {
	if round <= 1 {
		return "receipt-" + FileHex(fileDigest) + jsonSuffix
	}
	return fmt.Sprintf("receipt-%s-r%02d.json", FileHex(fileDigest), round)
}

func PartName(fileDigest string, n int) string {
	return fmt.Sprintf("part-%s-%04d.json", FileHex(fileDigest), n)
}

// FileHex is the hex prefix of a file identity digest that names its files.
func FileHex(fileDigest string) string {
	h := strings.TrimPrefix(fileDigest, digestPrefix)
	return h[:min(len(h), receiptHexLen)]
}

// ParseName parses the name of a record or head: its kind (nil for any other name),
// number (a receipt's round) and file's hex prefix (a receipt's or part's). A name is
// its kind's only if it renders back, with a number of at most four digits (a round's two).
func ParseName(name string) (k *FileKind, n int, hexPart string) {
	for _, k := range FileKinds[2:] {
		rest, ok := strings.CutPrefix(name, k.Prefix)
		if !ok {
			continue
		}
		h, again := "", ""
		if k.Kind == KindReceipt || k.Kind == KindPart {
			h = rest[:min(len(rest), receiptHexLen)]
		}
		num := strings.TrimLeft(strings.TrimSuffix(rest[len(h):], jsonSuffix), "-r")
		n, err := strconv.Atoi(cmp.Or(num, "1")) // none: a receipt of round 1
		switch {
		case k.Kind == KindReceipt && rest[len(h):] == jsonSuffix:
			again = name // receipt-<hex>.json: round 1, the commonest name, checked without rendering it
		case k.Kind == KindReceipt:
			again = ReceiptNameRound(h, n)
		case k.Kind == KindPart:
			again = PartName(h, n)
		default:
			again = fmt.Sprintf("%s%04d%s", k.Prefix, n, jsonSuffix)
		}
		if err != nil || n > 9999 || k.Kind == KindReceipt && n > maxRounds || !lowerHex(h) || again != name {
			return nil, 0, ""
		}
		return k, n, h
	}
	return nil, 0, ""
}

// ParseHeadName returns n for "head-NNNN.json" (n ≥ 1).
func ParseHeadName(name string) (int, bool) {
	k, n, _ := ParseName(name)
	return n, k != nil && k.Kind == KindHead && n >= 1
}

// TempName returns a fresh name for the temporary file of a durable write of
// final, so that two writers never meet on one (temporary-files-are-not-findings).
func TempName(final string) string {
	var b [TempHexLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return final + TempInfix + hex.EncodeToString(b[:])
}

// ParseTempName returns the journal name of a durable write's temporary file (the
// marker is written through one too, so that it appears locked: R83), or ok false.
func ParseTempName(name string) (final string, ok bool) {
	i := len(name) - TempHexLen - len(TempInfix)
	if i <= 0 || name[i:i+len(TempInfix)] != TempInfix || !lowerHex(name[i+len(TempInfix):]) ||
		!IsJournalName(name[:i]) {
		return "", false
	}
	return name[:i], true
}

// IsJournalName reports whether name is a name the journal writes, or the
// temporary file of one: a directory holding any of them is a run.
func IsJournalName(name string) bool {
	if final, ok := ParseTempName(name); ok {
		name = final
	}
	k, _ := KindOf(name)
	return k != nil || name == MarkerName
}

func lowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

// DigestOf returns "sha256:" and the hex SHA-256 of b.
func DigestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// IsDigest reports whether s is "sha256:" and 64 lower-case hex digits.
func IsDigest(s string) bool {
	return len(s) == len(digestPrefix)+64 && strings.HasPrefix(s, digestPrefix) && lowerHex(s[len(digestPrefix):])
}

// FileDigest is [PlannedFile.Digest] of the file with identity id.
func FileDigest(id string) string { return DigestOf([]byte(id)) }

// envelope is every record of a run (R82, deletion-detected): seq is its place in the
// run's one sequence (0, with prev null, only for a legacy run's evidence), prev the record
// before it (run.json for record 1), digest that of the encoding without it. The on-disk
// types are local (not the root package's) so that the format is frozen, whatever the Go API.
type envelope struct {
	Seq    int             `json:"seq"`
	Kind   string          `json:"kind"`
	Prev   *Link           `json:"prev"`
	Body   json.RawMessage `json:"body"`
	Digest string          `json:"digest,omitempty"`
}

// Link names a record (or run.json) by name and digest.
type Link struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Env is a verified record's envelope, without its kind and body.
type Env struct {
	Seq    int
	Prev   Link
	Digest string
}

// Seal encodes body as a record of kind at seq after prev: its file bytes and digest.
func Seal(kind string, seq int, prev Link, body any) ([]byte, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, "", err
	}
	e := envelope{Seq: seq, Kind: kind, Body: b}
	if seq != 0 {
		e.Prev = &prev
	}
	c, err := json.Marshal(e)
	if err != nil {
		return nil, "", err
	}
	e.Digest = DigestOf(c)
	out, err := MarshalLine(e)
	return out, e.Digest, err
}

// Unseal is the one loader of records: the envelope, kind and body of a file that is byte
// for byte the canonical encoding of a valid record (which also refuses unknown, duplicated
// or miscased keys, white space and trailing bytes), or why it is not.
func Unseal(data []byte) (Env, string, any, error) {
	var e envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Env{}, "", nil, fmt.Errorf("not valid JSON of this format: %v", err)
	}
	var body any
	for _, k := range FileKinds[2:] {
		if k.Kind == e.Kind {
			body = k.body()
		}
	}
	switch {
	case e.Kind == "":
		return Env{}, "", nil, errors.New("not a record envelope (an earlier, unreleased format, or made by hand)")
	case body == nil:
		return Env{}, "", nil, fmt.Errorf("kind %q is not a record's", SanitizeNote(e.Kind, 16))
	}
	if err := json.Unmarshal(e.Body, body); err != nil {
		return Env{}, "", nil, fmt.Errorf("not valid JSON of this format: %v", err)
	}
	var prev Link
	if e.Prev != nil {
		prev = *e.Prev
	}
	want, d, err := Seal(e.Kind, e.Seq, prev, body)
	if err != nil {
		return Env{}, "", nil, err
	}
	var v rules
	v.check(d != e.Digest, "digest does not match the content (edited)")
	v.check(!bytes.Equal(want, data), "not in canonical form (edited)")
	v.check(e.Seq < 0 || e.Seq > MaxRunSeq, "seq %d outside 1..%d", e.Seq, MaxRunSeq)
	v.check(e.Seq == 0 && e.Kind == KindHead, "a head at seq 0")
	v.check(e.Seq > 0 && prev.Name != ManifestName && !IsRecordName(prev.Name) ||
		e.Kind != KindHead && e.Seq > 0 && (e.Seq == 1) != (prev.Name == ManifestName), "prev.name is run.json exactly for record 1, else a record's name")
	v.check(e.Seq > 0 && !IsDigest(prev.Digest), "prev.digest is not a sha256 digest")
	if err := cmp.Or(v.err, validBody(body)); err != nil {
		return Env{}, "", nil, err
	}
	return Env{Seq: e.Seq, Prev: prev, Digest: d}, e.Kind, body, nil
}

// rules is a check of fields in order: err is the first broken rule's.
type rules struct{ err error }

// check breaks a rule when broken, unless one broke before: err is then format's.
func (v *rules) check(broken bool, format string, args ...any) {
	if broken && v.err == nil {
		v.err = fmt.Errorf(format, args...)
	}
}

// validBody is the one check of a record's own fields, by kind (the scan checks its neighbours).
func validBody(body any) error {
	var v rules
	switch b := body.(type) {
	case *EntryBody:
		return ValidEntry(*b)
	case *ReceiptBody:
		v.check(!IsDigest(b.FileDigest), "file_digest is not a sha256 digest")
		v.check(b.ACK != httprule.IsSuccess(b.Status), "ack does not agree with status")
		v.check(b.Round < 0 || b.Round == 1 || b.Round > maxRounds, "round %d outside 2..%d (round 1 is written without the field)", b.Round, maxRounds)
		return cmp.Or(v.err, ValidRequest(b.PlanDigest, b.Method, b.URLDigest, b.Attempt, b.ResendOf))
	case *PartBody:
		v.check(!IsDigest(b.FileDigest), "file_digest is not a sha256 digest")
		v.check(b.Part < 1 || b.Part > MaxParts, "part %d outside 1..%d", b.Part, MaxParts)
		v.check(b.Accepted != httprule.IsSuccess(b.Status), "accepted does not agree with status")
		v.check(httprule.IsThrottled(b.Status), "status 429 belongs in a backoff entry, not a part receipt")
		v.check(b.RequestID != redact.ID(b.RequestID), "request_id is not sanitized")
		return cmp.Or(v.err, ValidRequest(b.PlanDigest, b.Method, b.URLDigest, b.Attempt, b.ResendOf))
	case *ReviewBody:
		return validReview(b)
	case *HeadBody:
		if g := b.Begun; g != nil {
			v.check(!IsDigest(g.FileDigest), "begun.file_digest is not a sha256 digest")
			v.check(g.BegunAtUTC < 0 || g.BegunAtUTC > unixtime.Max, "begun.begun_at_utc %d is not a Unix time", g.BegunAtUTC)
			return cmp.Or(v.err, ValidRequest("", g.Method, g.URLDigest, g.Attempt, g.ResendOf))
		}
	}
	return nil
}

// NameOf is the file name of a record: it follows from the content, so a renamed record is seen.
func NameOf(seq int, body any) string {
	switch b := body.(type) {
	case *EntryBody:
		return EntryName(b.Sequence)
	case *ReceiptBody:
		return ReceiptNameRound(b.FileDigest, max(b.Round, 1))
	case *PartBody:
		return PartName(b.FileDigest, b.Part)
	case *ReviewBody:
		return ReviewName(b.Sequence)
	}
	return HeadName(seq)
}

// Bodies of the records (docs/policy.md: "Record formats").

type RetryAfterJSON struct {
	Kind  string `json:"kind"`
	Value int64  `json:"value"`
}

type TimingJSON struct {
	ReceivedAtUTC      int64 `json:"received_at_utc"`
	NotBeforeUTC       int64 `json:"not_before_utc"`
	ServerDelaySeconds int64 `json:"server_delay_seconds"`
}

// Provenance is a journaled request's upload attempt; part marks a request of [WithUploadPart].
type Provenance struct {
	FileDigest string `json:"file_digest"`
	Attempt    int    `json:"attempt"`
	ResendOf   string `json:"resend_of"`
	Part       bool   `json:"part,omitempty"`
}

// EntryBody is a backoff entry's; its event digest is the record's digest.
type EntryBody struct {
	BackoffVersion string         `json:"backoff_version"`
	Sequence       int            `json:"sequence"`
	PlanDigest     string         `json:"plan_digest"`
	Method         string         `json:"method"`
	URLDigest      string         `json:"url_digest"`
	RequestID      string         `json:"request_id"`
	Status         int            `json:"status"`
	RetryAfter     RetryAfterJSON `json:"retry_after"`
	Timing         *TimingJSON    `json:"timing"`
	Provenance     Provenance     `json:"provenance"`
}

// ReceiptBody is a commit receipt's; Round is omitted for round 1.
type ReceiptBody struct {
	PlanDigest     string `json:"plan_digest"`
	FileDigest     string `json:"file_digest"`
	Method         string `json:"method"`
	URLDigest      string `json:"url_digest"`
	Attempt        int    `json:"attempt"`
	ResendOf       string `json:"resend_of"`
	Status         int    `json:"status"`
	ACK            bool   `json:"ack"`
	RequestID      string `json:"request_id"`
	ETag           string `json:"etag"`
	TransportError string `json:"transport_error"`
	RecordedAtUTC  int64  `json:"recorded_at_utc"`
	Round          int    `json:"round,omitempty"`
}

// PartBody is a part receipt's: its 2xx is "accepted", never an ACK (parts-are-not-acks).
type PartBody struct {
	PlanDigest     string `json:"plan_digest"`
	FileDigest     string `json:"file_digest"`
	Part           int    `json:"part"`
	Method         string `json:"method"`
	URLDigest      string `json:"url_digest"`
	Attempt        int    `json:"attempt"`
	ResendOf       string `json:"resend_of"`
	Status         int    `json:"status"`
	Accepted       bool   `json:"accepted"`
	RequestID      string `json:"request_id"`
	ETag           string `json:"etag"`
	TransportError string `json:"transport_error"`
	RecordedAtUTC  int64  `json:"recorded_at_utc"`
}

// ReviewBody is a review's. Marker is set on a pending review only (whose
// file is the marker's: file_digest ""), Restriction on a restriction review only.
type ReviewBody struct {
	Sequence      int                  `json:"sequence"`
	PlanDigest    string               `json:"plan_digest"`
	FileDigest    string               `json:"file_digest"`
	Decision      Decision             `json:"decision"`
	Reviewer      string               `json:"reviewer"`
	ReviewedAtUTC int64                `json:"reviewed_at_utc"`
	Note          string               `json:"note"`
	Evidence      ReviewEvidence       `json:"evidence"`
	Marker        *MarkerEvidence      `json:"marker,omitempty"`
	Restriction   *RestrictionEvidence `json:"restriction,omitempty"`
}

// ReviewEvidence is what a review saw of its file ("" for a digest of none);
// the review applies to these records only: later ones belong to the next round.
type ReviewEvidence struct {
	Entries         int    `json:"entries"`
	LastEventDigest string `json:"last_event_digest"`
	Parts           int    `json:"parts"`
	LastPartDigest  string `json:"last_part_digest"`
	ReceiptDigest   string `json:"receipt_digest"`
}

// MarkerEvidence is what a pending review saw of the abandoned request: the digest of its
// marker's bytes (of its begun head for a marker removed by hand, R85), what the marker names
// (empty when unreadable) and the run's not-before, since the lost response's is unknown.
type MarkerEvidence struct {
	Digest       string `json:"digest"`
	Method       string `json:"method"`
	URLDigest    string `json:"url_digest"`
	FileDigest   string `json:"file_digest"`
	Part         bool   `json:"part"`
	BegunAtUTC   int64  `json:"begun_at_utc"`
	NotBeforeUTC int64  `json:"not_before_utc"`
}

// RestrictionEvidence binds an entry without timing and the not-before the operator gives it.
type RestrictionEvidence struct {
	Entry        string `json:"entry"`
	EventDigest  string `json:"event_digest"`
	NotBeforeUTC int64  `json:"not_before_utc"`
}

// HeadBody is a head's: {} after record NNNN, whose prev names it; or, written before an
// upload's request (R85), begun the request, prev record NNNN-1, and it stands for whatever
// record takes place NNNN (the request's entry or receipt, or its marker's pending review).
type HeadBody struct {
	Begun *BegunRequest `json:"begun,omitempty"`
}

// BegunRequest is what the marker says of its request, without its worker.
type BegunRequest struct {
	Method     string `json:"method"`
	URLDigest  string `json:"url_digest"`
	FileDigest string `json:"file_digest"`
	Part       bool   `json:"part,omitempty"`
	Attempt    int    `json:"attempt"`
	ResendOf   string `json:"resend_of"`
	BegunAtUTC int64  `json:"begun_at_utc"`
}

// The methods of a marker that is no HTTP request. A Next claim's (ClaimMethod): a worker
// that dies before its upload begins leaves it dead and its file eligible: the next worker
// removes it (dead-claim-heals); once the upload began (its begun head), the file is unknown
// until a review. A review's (ReviewMethod) names no upload in flight.
const (
	ClaimMethod  = "CLAIM"
	ReviewMethod = "REVIEW"
)

// MarkerFile is pending-request.json: its presence is what matters; its
// content names the request for a review, and its worker for `journal status`.
type MarkerFile struct {
	BackoffVersion string `json:"backoff_version"`
	Method         string `json:"method"`
	URLDigest      string `json:"url_digest"`
	Attempt        int    `json:"attempt"`
	ResendOf       string `json:"resend_of"`
	FileDigest     string `json:"file_digest"`
	BegunAtUTC     int64  `json:"begun_at_utc"`
	Part           bool   `json:"part,omitempty"`
	Host           string `json:"host,omitempty"`
	PID            int    `json:"pid,omitempty"`
}

// ParseMarker reads what it can of pending-request.json.
func ParseMarker(data []byte) (MarkerFile, bool) {
	var m MarkerFile
	if json.Unmarshal(data, &m) != nil || (m.FileDigest != "" && !IsDigest(m.FileDigest)) {
		return MarkerFile{}, false
	}
	return m, true
}

// ManifestBody is run.json's content, the genesis of the run's sequence;
// Parallel is a parallel root's shard count.
type ManifestBody struct {
	BackoffVersion string `json:"backoff_version"`
	PlanDigest     string `json:"plan_digest"`
	CreatedAtUTC   int64  `json:"created_at_utc"`
	Parallel       int    `json:"parallel,omitempty"`
}

type manifestFile struct {
	ManifestBody
	Digest string `json:"digest"`
}

func EncodeManifest(m ManifestBody) ([]byte, string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, "", err
	}
	d := DigestOf(b)
	out, err := MarshalLine(manifestFile{m, d})
	return out, d, err
}

// ManifestInfo is what run.json says. genesis is the prev of record 1: the
// manifest's digest (1.0) or that of the file's bytes (legacy).
type ManifestInfo struct {
	Legacy     bool
	PlanDigest string
	Genesis    string
	Parallel   int
}

// ParseManifest parses run.json. A JSON object without a backoff_version
// key is a legacy manifest: only its plan_digest (when a string) is read.
func ParseManifest(data []byte) (ManifestInfo, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil || keys == nil {
		return ManifestInfo{}, errors.New("not a JSON object")
	}
	if _, ok := keys["backoff_version"]; !ok {
		mi := ManifestInfo{Legacy: true, Genesis: DigestOf(data)}
		var s string
		if json.Unmarshal(keys["plan_digest"], &s) == nil && IsDigest(s) {
			mi.PlanDigest = s
		}
		return mi, nil
	}
	var mf manifestFile
	if err := json.Unmarshal(data, &mf); err != nil {
		return ManifestInfo{}, fmt.Errorf("not valid JSON of this format: %v", err)
	}
	want, d, err := EncodeManifest(mf.ManifestBody) // a plain struct's encoding: never an error
	if err != nil {
		return ManifestInfo{}, err
	}
	var v rules
	v.check(mf.BackoffVersion != BackoffVersion, "unsupported backoff_version %q (want %q)", mf.BackoffVersion, BackoffVersion)
	v.check(d != mf.Digest, "digest does not match the content (edited)")
	v.check(!bytes.Equal(want, data), "not in canonical form (edited)")
	v.check(!IsDigest(mf.PlanDigest), "plan_digest is not a sha256 digest")
	v.check(mf.CreatedAtUTC <= 0, "created_at_utc is not a positive Unix time")
	v.check(mf.Parallel != 0 && (mf.Parallel < MinParallel || mf.Parallel > MaxParallel), "parallel %d is not %d to %d", mf.Parallel, MinParallel, MaxParallel)
	if v.err != nil {
		return ManifestInfo{}, v.err
	}
	return ManifestInfo{PlanDigest: mf.PlanDigest, Genesis: mf.Digest, Parallel: mf.Parallel}, nil
}

type planFile struct {
	Files []string `json:"files"`
}

// ParsePlanList parses plan.json: exactly the canonical encoding of sorted,
// distinct file identity digests; its digest is the run's plan digest.
func ParsePlanList(data []byte) ([]string, string, error) {
	var pl planFile
	if err := json.Unmarshal(data, &pl); err != nil {
		return nil, "", fmt.Errorf("not valid JSON of this format: %v", err)
	}
	for i, f := range pl.Files {
		switch {
		case !IsDigest(f):
			return nil, "", fmt.Errorf("files[%d] is not a sha256 digest", i)
		case i > 0 && pl.Files[i-1] >= f:
			return nil, "", errors.New("files are not sorted and distinct")
		}
	}
	want, err := MarshalLine(pl)
	switch {
	case pl.Files == nil: // null or missing (the loop above saw no file)
		return nil, "", errors.New("files is not a list")
	case err != nil:
		return nil, "", err
	case !bytes.Equal(want, data):
		return nil, "", errors.New("not in canonical form (edited)")
	}
	return pl.Files, DigestOf(want[:len(want)-1]), nil
}

// EncodePlanList returns plan.json for a plan's sorted file identity digests.
func EncodePlanList(digests []string) ([]byte, error) { return MarshalLine(planFile{digests}) }

var knownKinds = []readrecovery.RetryAfterKind{readrecovery.RetryAfterSeconds, readrecovery.RetryAfterDate,
	readrecovery.RetryAfterMissing, readrecovery.RetryAfterInvalid, readrecovery.RetryAfterOverlong,
	readrecovery.RetryAfterOversized}

// ValidRequest checks the request fields every record shares: nothing but a method token
// and digests, so that no URL, query or credential can be stored (nothing-secret-leaves).
func ValidRequest(planDigest, method, urlDigest string, attempt int, resendOf string) error {
	var v rules
	v.check(method == "" || len(method) > 16 || strings.Trim(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "", "method %q is not an HTTP method", method)
	v.check(planDigest != "" && !IsDigest(planDigest), "plan_digest is not a sha256 digest")
	v.check(!IsDigest(urlDigest), "url_digest is not a sha256 digest")
	v.check(attempt < 1, "attempt %d is not positive", attempt)
	v.check(resendOf != "" && !IsDigest(resendOf), "resend_of is not a sha256 digest")
	return v.err
}

// ValidEntry checks an entry's fields: a known Retry-After kind, a value that
// is 0 for every kind but seconds and date, and not_before exactly received + delay.
func ValidEntry(e EntryBody) error {
	ra, t := e.RetryAfter, e.Timing
	v := rules{err: ValidRequest(e.PlanDigest, e.Method, e.URLDigest, e.Provenance.Attempt, e.Provenance.ResendOf)}
	v.check(e.BackoffVersion != BackoffVersion, "unsupported backoff_version %q", e.BackoffVersion)
	v.check(e.Sequence < 1 || e.Sequence > MaxEntries, "sequence %d outside 1..%d", e.Sequence, MaxEntries)
	v.check(e.RequestID != redact.ID(e.RequestID), "request_id is not sanitized")
	v.check(e.Status < 100 || e.Status > 599, "status %d is not an HTTP status", e.Status)
	v.check(e.Provenance.FileDigest != "" && !IsDigest(e.Provenance.FileDigest), "provenance.file_digest is not a sha256 digest")
	v.check(!slices.Contains(knownKinds, readrecovery.RetryAfterKind(ra.Kind)), "retry_after kind %q is unknown", ra.Kind)
	v.check(ra.Value < 0, "retry_after value %d is negative", ra.Value)
	v.check(ra.Value != 0 && ra.Kind != string(readrecovery.RetryAfterSeconds) && ra.Kind != string(readrecovery.RetryAfterDate),
		"retry_after kind %q must have value 0", ra.Kind)
	if t != nil {
		v.check(t.ReceivedAtUTC <= 0, "timing received_at_utc %d is not a positive Unix time", t.ReceivedAtUTC)
		v.check(t.ServerDelaySeconds < 0, "timing server_delay_seconds %d is negative", t.ServerDelaySeconds)
		v.check(t.ReceivedAtUTC > unixtime.Max-t.ServerDelaySeconds, "timing overflows Unix seconds")
		v.check(t.NotBeforeUTC != t.ReceivedAtUTC+t.ServerDelaySeconds, "timing not_before_utc %d is not received_at_utc + server_delay_seconds", t.NotBeforeUTC)
	}
	return v.err
}

// validReview checks a review's own fields (its evidence against the run is reviewProblem's).
func validReview(r *ReviewBody) error {
	ev, m, rs := r.Evidence, r.Marker, r.Restriction
	fileless := m != nil || rs != nil // a pending or restriction review, which names no file_digest
	var v rules
	v.check(r.Sequence < 1 || r.Sequence > MaxReviews, "sequence %d outside 1..%d", r.Sequence, MaxReviews)
	v.check(r.PlanDigest != "" && !IsDigest(r.PlanDigest), "plan_digest is not a sha256 digest")
	v.check((r.Decision == DecisionPending) != (m != nil), "marker is set on a pending review, and only there")
	v.check((r.Decision == DecisionRestriction) != (rs != nil), "restriction is set on a restriction review, and only there")
	if m != nil {
		v.check(!IsDigest(m.Digest), "marker.digest is not a sha256 digest")
		v.check(m.FileDigest != "" && !IsDigest(m.FileDigest) || m.URLDigest != "" && !IsDigest(m.URLDigest), "marker names a digest that is not sha256")
		v.check(m.Method != SanitizeNote(m.Method, 16), "marker.method is not sanitized")
		v.check(m.BegunAtUTC < 0 || m.BegunAtUTC > unixtime.Max, "marker.begun_at_utc %d is not a Unix time", m.BegunAtUTC)
		v.check(m.NotBeforeUTC < r.ReviewedAtUTC+PendingWaitSeconds || m.NotBeforeUTC > unixtime.Max,
			"marker.not_before_utc %d is not at least reviewed_at_utc + %d s", m.NotBeforeUTC, PendingWaitSeconds)
	}
	if rs != nil {
		v.check(!IsRecordName(rs.Entry) || !IsDigest(rs.EventDigest), "restriction does not name an entry and its event digest")
		v.check(rs.NotBeforeUTC < r.ReviewedAtUTC+PendingWaitSeconds || rs.NotBeforeUTC > unixtime.Max,
			"restriction.not_before_utc %d is not at least reviewed_at_utc + %d s", rs.NotBeforeUTC, PendingWaitSeconds)
	}
	v.check(fileless && r.FileDigest != "", "a pending or restriction review names no file_digest")
	v.check(!fileless && !IsDigest(r.FileDigest), "file_digest is not a sha256 digest")
	v.check(!fileless && r.Decision != DecisionReupload && r.Decision != DecisionSkip, "decision %q is not reupload, skip, pending or restriction", r.Decision)
	v.check(r.Reviewer == "" || r.Reviewer != SanitizeNote(r.Reviewer, MaxReviewerBytes), "reviewer is empty or not sanitized")
	v.check(r.Note != SanitizeNote(r.Note, MaxNoteBytes), "note is not sanitized")
	v.check(r.ReviewedAtUTC <= 0 || r.ReviewedAtUTC > unixtime.Max, "reviewed_at_utc %d is not a Unix time", r.ReviewedAtUTC)
	v.check(ev.Entries < 0 || ev.Entries > MaxEntries || (ev.Entries == 0) != (ev.LastEventDigest == ""), "evidence entries and last_event_digest disagree")
	v.check(ev.Parts < 0 || ev.Parts > MaxParts || (ev.Parts == 0) != (ev.LastPartDigest == ""), "evidence parts and last_part_digest disagree")
	v.check(ev.LastEventDigest != "" && !IsDigest(ev.LastEventDigest) || ev.LastPartDigest != "" && !IsDigest(ev.LastPartDigest) ||
		ev.ReceiptDigest != "" && !IsDigest(ev.ReceiptDigest), "evidence holds a digest that is not sha256")
	return v.err
}

// Representable reports whether a timing lies within the bound of representable-times:
// beyond it an entry is kept without timing (the run is unresolved), never a failure to
// record the restriction. An invalid timing is validEntry's.
func Representable(t *readrecovery.RetryAfterTiming) bool {
	return t.ReceivedAtUTC <= unixtime.Max && t.NotBeforeUTC <= unixtime.Max &&
		(t.ServerDelaySeconds < 0 || t.ReceivedAtUTC <= unixtime.Max-t.ServerDelaySeconds)
}

// Untimed returns why an entry cannot bound its restriction in time (the run is unresolved), or "".
func Untimed(e EntryBody) string {
	switch {
	case e.RetryAfter.Kind == string(readrecovery.RetryAfterOversized):
		return "retry_after oversized: no representable delay (unresolved)"
	case e.Timing == nil:
		return fmt.Sprintf("retry_after %s without timing: unrepresentable or unknown delay (unresolved)", e.RetryAfter.Kind)
	}
	return ""
}

func MarshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// SanitizeNote makes free text safe to store and print: valid UTF-8, printable characters
// only (every control character, newline and ESC included, becomes a space), no URL query or
// userinfo, runs of spaces collapsed, trimmed, cut to at most limit bytes on a rune boundary.
// Its result is a fixed point, so a loader can check that a stored text is sanitized.
func SanitizeNote(s string, limit int) string {
	for range 8 {
		t := sanitizeOnce(s, limit)
		if t == s {
			break
		}
		s = t
	}
	return s
}

func sanitizeOnce(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.ToValidUTF8(redact.Text(s), "")
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > limit {
		_, size := utf8.DecodeLastRuneInString(s)
		s = strings.TrimRight(s[:len(s)-size], " ")
	}
	return s
}

// The bounds of a parallel run's shard count.
const (
	MinParallel = 2
	MaxParallel = 16 // the most shards (requests in flight at once) of a run
)

// FileKind is the one description of a kind of file a run holds (docs/policy.md:
// "The run's files"): the scan, Inspect, isJournalName and the run's sequence read it.
type FileKind struct {
	Kind, Prefix string // the envelope's kind; "" for run.json and plan.json, named prefix
	MaxN         int    // the bound of a numbered kind's number (0: not numbered)
	MaxBytes     int64  // the size cap (0: maxRecordBytes)
	// Attempted: a file of the kind records an attempt of the file its name's hex prefix
	// names (ParseName), so that one failing verification leaves its file unknown.
	Attempted bool
	body      func() any // an empty body of a record kind (unseal)
}

// Record reports whether the kind's files are records of the run's sequence (not a head).
func (k *FileKind) Record() bool { return k.Kind != "" && k.Kind != KindHead }

// FileKinds is the table, in the order of the scan: each kind is checked
// against the kinds before it.
var FileKinds = []*FileKind{
	{Prefix: ManifestName, MaxBytes: maxManifestBytes},
	{Prefix: PlanName, MaxBytes: MaxPlanBytes},
	{Kind: KindEntry, Prefix: "backoff-", MaxN: MaxEntries, body: newBody[EntryBody]},
	{Kind: KindReceipt, Prefix: "receipt-", Attempted: true, body: newBody[ReceiptBody]},
	{Kind: KindPart, Prefix: "part-", Attempted: true, body: newBody[PartBody]},
	{Kind: KindReview, Prefix: "review-", MaxN: MaxReviews, body: newBody[ReviewBody]},
	{Kind: KindHead, Prefix: "head-", MaxN: MaxRunSeq, body: newBody[HeadBody]},
}

func newBody[B any]() any { return new(B) }

// KindOf returns the kind of a name and its number, or nil.
func KindOf(name string) (*FileKind, int) {
	for _, k := range FileKinds[:2] {
		if name == k.Prefix {
			return k, 0
		}
	}
	k, n, _ := ParseName(name)
	return k, n
}

// IsRecordName reports whether name is a record of the run's sequence.
func IsRecordName(name string) bool {
	k, _ := KindOf(name)
	return k != nil && k.Record()
}

// ShardName is the name of shard k (1-based) inside its root.
func ShardName(k int) string { return fmt.Sprintf("shard-%02d", k) }

// ParseShardName returns k for "shard-KK" (two digits, 1 to maxParallel).
func ParseShardName(name string) (int, bool) {
	k, err := strconv.Atoi(strings.TrimPrefix(name, "shard-"))
	if err != nil || k < 1 || k > MaxParallel || ShardName(k) != name {
		return 0, false
	}
	return k, true
}

// ParseShardRef splits "shard-KK/name" into k and name.
func ParseShardRef(ref string) (int, string, bool) {
	sh, name, ok := strings.Cut(ref, "/")
	k, isShard := ParseShardName(sh)
	return k, name, ok && isShard
}

// InShard names a shard's file by its place in the root ("" stays "").
func InShard(k int, name string) string {
	if name == "" {
		return ""
	}
	return ShardName(k) + "/" + name
}

func MarkerRef(k int) string { return InShard(k, MarkerName) }

// ShardIndex maps a file identity (or URL) digest to its shard, 1 to n
// (docs/policy.md: parallel-shards); a digest not sha256 maps to shard 1.
func ShardIndex(digest string, n int) int {
	h := strings.TrimPrefix(digest, "sha256:")
	if b, err := hex.DecodeString(h[:min(len(h), 16)]); err == nil && len(b) == 8 {
		return int(binary.BigEndian.Uint64(b)%uint64(n)) + 1
	}
	return 1
}

// ShardPlan returns the digests of the sorted plan that map to shard k.
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

// PlanDigestOf is digestOfPlan of sorted file digests (never nil: its callers
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
	// DecisionPending is a pending review's ([Journal.ReviewPending]): its
	// marker blocks no more, its file is unknown, and the run waits.
	DecisionPending Decision = "pending"
	// DecisionRestriction is a restriction review's ([Journal.ReviewRestriction]).
	DecisionRestriction Decision = "restriction"
)
