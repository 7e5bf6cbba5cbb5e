package journal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// backoffVersion is the format version a new run declares in its manifest
// and every backoff entry carries (docs/policy.md: private-run-directory).
const backoffVersion = "1.0"

// Limits of one run directory (docs/policy.md: bounded-journal).
const (
	// maxEntries is the number of backoff entries a run may hold:
	// backoff-0001.json to backoff-0200.json.
	maxEntries = 200
	// maxFiles is the number of directory entries a run may hold, whatever
	// they are, at every instant (including the temporary file of a write).
	maxFiles = 1003
)

// File names inside a run directory.
const (
	manifestName = "run.json"
	planName     = "plan.json"
	markerName   = "pending-request.json"
	// tempInfix and tempHexLen make the name of a durable write's
	// temporary file: the final name, ".tmp-" and 16 random hex digits
	// (see tempName). Only dirStore.put writes such names.
	tempInfix    = ".tmp-"
	tempHexLen   = 16
	entryPrefix  = "backoff-"
	receiptPref  = "receipt-"
	partPref     = "part-"
	reviewPrefix = "review-"
	headPrefix   = "head-"
	jsonSuffix   = ".json"
	// receiptHexLen is the number of hex digits of the file identity digest
	// in a receipt's name (128 bits).
	receiptHexLen = 32
)

// Size caps, checked with Stat before a file is read.
const (
	maxManifestBytes = 64 << 10
	maxRecordBytes   = 4 << 10
	// maxPlanBytes bounds plan.json: about 13,000 planned files.
	maxPlanBytes = 1 << 20
)

// Numbering limits of the new record kinds (the file limit bounds them
// first in practice).
const (
	// maxParts is the number of part receipts one file may have:
	// part-<hex>-0001.json to part-<hex>-9999.json.
	maxParts = 9999
	// maxReviews is the number of reviews a run may hold.
	maxReviews = 9999
	// maxRounds bounds the upload rounds of one file (1 plus its reupload
	// reviews): receipt-<hex>-r02.json to receipt-<hex>-r99.json.
	maxRounds = 99
)

// footprint is the most directory entries one journaled request adds at its
// peak: the pending marker, the entry or receipt, and the run's new head
// and its temporary file (the record's temporary file is removed before
// the head's is created; the head it replaces is removed last).
const footprint = 4

func entryName(n int) string { return fmt.Sprintf("%s%04d%s", entryPrefix, n, jsonSuffix) }

func receiptName(fileDigest string) string { return receiptNameRound(fileDigest, 1) }

// fileHex is the hex prefix of a file identity digest that names its files.
func fileHex(fileDigest string) string {
	h := strings.TrimPrefix(fileDigest, digestPrefix)
	return h[:min(len(h), receiptHexLen)]
}

// receiptNameRound names the commit receipt of a file's upload round:
// receipt-<hex>.json for round 1 (the format of every run before reviews
// existed), receipt-<hex>-rNN.json for a round after a reupload review.
func receiptNameRound(fileDigest string, round int) string {
	if round <= 1 {
		return receiptPref + fileHex(fileDigest) + jsonSuffix
	}
	return fmt.Sprintf("%s%s-r%02d%s", receiptPref, fileHex(fileDigest), round, jsonSuffix)
}

// partName names the n-th part receipt of a file.
func partName(fileDigest string, n int) string {
	return fmt.Sprintf("%s%s-%04d%s", partPref, fileHex(fileDigest), n, jsonSuffix)
}

func reviewName(n int) string { return fmt.Sprintf("%s%04d%s", reviewPrefix, n, jsonSuffix) }

func headName(n int) string { return fmt.Sprintf("%s%04d%s", headPrefix, n, jsonSuffix) }

// parseHeadName returns n for "head-NNNN.json".
func parseHeadName(name string) (int, bool) {
	if !strings.HasPrefix(name, headPrefix) || !strings.HasSuffix(name, jsonSuffix) {
		return 0, false
	}
	d := strings.TrimSuffix(strings.TrimPrefix(name, headPrefix), jsonSuffix)
	if len(d) != 4 || !allDigits(d) {
		return 0, false
	}
	n, _ := strconv.Atoi(d)
	return n, n >= 1
}

// parseEntryName returns n for "backoff-NNNN.json" (exactly four digits).
func parseEntryName(name string) (int, bool) {
	if !strings.HasPrefix(name, entryPrefix) || !strings.HasSuffix(name, jsonSuffix) {
		return 0, false
	}
	d := strings.TrimSuffix(strings.TrimPrefix(name, entryPrefix), jsonSuffix)
	if len(d) != 4 || !allDigits(d) {
		return 0, false
	}
	n, _ := strconv.Atoi(d)
	return n, true
}

// parseReceiptName returns the hex prefix and round of
// "receipt-<32 hex>.json" (round 1) or "receipt-<32 hex>-rNN.json" (NN from
// 02 to 99).
func parseReceiptName(name string) (hex string, round int, ok bool) {
	if !strings.HasPrefix(name, receiptPref) || !strings.HasSuffix(name, jsonSuffix) {
		return "", 0, false
	}
	h := strings.TrimSuffix(strings.TrimPrefix(name, receiptPref), jsonSuffix)
	round = 1
	if len(h) == receiptHexLen+4 && h[receiptHexLen:receiptHexLen+2] == "-r" && allDigits(h[receiptHexLen+2:]) {
		round, _ = strconv.Atoi(h[receiptHexLen+2:])
		if round < 2 || round > maxRounds {
			return "", 0, false
		}
		h = h[:receiptHexLen]
	}
	if len(h) != receiptHexLen || !lowerHex(h) {
		return "", 0, false
	}
	return h, round, true
}

// parsePartName returns the hex prefix and number of
// "part-<32 hex>-NNNN.json".
func parsePartName(name string) (hex string, n int, ok bool) {
	if !strings.HasPrefix(name, partPref) || !strings.HasSuffix(name, jsonSuffix) {
		return "", 0, false
	}
	h := strings.TrimSuffix(strings.TrimPrefix(name, partPref), jsonSuffix)
	if len(h) != receiptHexLen+5 || h[receiptHexLen] != '-' || !lowerHex(h[:receiptHexLen]) || !allDigits(h[receiptHexLen+1:]) {
		return "", 0, false
	}
	n, _ = strconv.Atoi(h[receiptHexLen+1:])
	return h[:receiptHexLen], n, true
}

// parseReviewName returns n for "review-NNNN.json".
func parseReviewName(name string) (int, bool) {
	if !strings.HasPrefix(name, reviewPrefix) || !strings.HasSuffix(name, jsonSuffix) {
		return 0, false
	}
	d := strings.TrimSuffix(strings.TrimPrefix(name, reviewPrefix), jsonSuffix)
	if len(d) != 4 || !allDigits(d) {
		return 0, false
	}
	n, _ := strconv.Atoi(d)
	return n, true
}

// tempName returns a fresh name for the temporary file of a durable write
// of final: final + ".tmp-" + 16 random hex digits. The random part keeps
// two writers (two processes, two Journals) from ever meeting on one
// temporary name.
func tempName(final string) string {
	var b [tempHexLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return final + tempInfix + hex.EncodeToString(b[:])
}

// parseTempName returns the record name (or the marker's) of a temporary
// file of the durable write path (see tempName); ok is false for any
// other name, "x.tmp" and the temporary name of a non-journal name
// included. The marker is written through one too, so that it appears
// locked (R83).
func parseTempName(name string) (final string, ok bool) {
	i := len(name) - tempHexLen - len(tempInfix)
	if i <= 0 || name[i:i+len(tempInfix)] != tempInfix || !lowerHex(name[i+len(tempInfix):]) {
		return "", false
	}
	final = name[:i]
	if !isJournalName(final) {
		return "", false
	}
	return final, true
}

// isJournalName reports whether name is a name the journal writes, or the
// temporary file of one: a directory holding any of them is a run.
func isJournalName(name string) bool {
	if final, ok := parseTempName(name); ok {
		name = final
	}
	k, _ := kindOf(name)
	return k != nil || name == markerName
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

const digestPrefix = "sha256:"

// digestOf returns "sha256:" and the hex SHA-256 of b.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// isDigest reports whether s is "sha256:" and 64 lower-case hex digits.
func isDigest(s string) bool {
	return len(s) == len(digestPrefix)+64 && strings.HasPrefix(s, digestPrefix) && lowerHex(s[len(digestPrefix):])
}

// fileDigest is [PlannedFile.Digest] of the file with identity id.
func fileDigest(id string) string { return digestOf([]byte(id)) }

// PlannedFile is one file of a batch plan.
type PlannedFile struct {
	// ID is the file's stable identity within the batch (for example its
	// relative path and content hash). It must be non-empty and unique in
	// the plan; it is stored only as its [FileDigest]. Do not put secrets
	// in it.
	ID string
}

// digestOfPlan returns the digest a run binds for a plan: "sha256:" and the
// hex SHA-256 of the canonical JSON {"files":[...]} of the sorted file
// identity digests. The order of files does not matter. It fails for an
// empty or duplicated ID.
func digestOfPlan(files []PlannedFile) (string, error) {
	ds := make([]string, 0, len(files))
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if f.ID == "" {
			return "", errors.New("journal: planned file with an empty ID")
		}
		d := fileDigest(f.ID)
		if seen[d] {
			return "", fmt.Errorf("journal: planned file %q appears twice", f.ID)
		}
		seen[d] = true
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return planDigestOf(ds), nil
}

// On-disk types. They are local (not the root package's types) so that the
// file format is frozen here, whatever happens to the Go API.

type retryAfterJSON struct {
	Kind  string `json:"kind"`
	Value int64  `json:"value"`
}

type timingJSON struct {
	ReceivedAtUTC      int64 `json:"received_at_utc"`
	NotBeforeUTC       int64 `json:"not_before_utc"`
	ServerDelaySeconds int64 `json:"server_delay_seconds"`
}

// manifestBody is the canonical content of run.json; manifest_digest is the
// digest of its encoding/json encoding.
type manifestBody struct {
	BackoffVersion string `json:"backoff_version"`
	PlanDigest     string `json:"plan_digest"`
	CreatedAtUTC   int64  `json:"created_at_utc"`
	// Parallel is the shard count of a parallel run's root
	// (WithParallel, 2 to 16); omitted at zero, so that the manifest of
	// every other run (a shard's included) keeps its canonical bytes.
	Parallel int `json:"parallel,omitempty"`
}

type manifestFile struct {
	manifestBody
	Digest string `json:"digest"`
}

// provenance is the upload-attempt provenance of a journaled request.
type provenance struct {
	FileDigest string `json:"file_digest"`
	Attempt    int    `json:"attempt"`
	ResendOf   string `json:"resend_of"`
	// Part is true for a request marked [WithUploadPart]; omitted when
	// false.
	Part bool `json:"part,omitempty"`
}

// entryBody is the canonical content of a backoff entry; event_digest is the
// digest of its encoding/json encoding (fields in this order).
type entryBody struct {
	BackoffVersion string         `json:"backoff_version"`
	Sequence       int            `json:"sequence"`
	PlanDigest     string         `json:"plan_digest"`
	Method         string         `json:"method"`
	URLDigest      string         `json:"url_digest"`
	RequestID      string         `json:"request_id"`
	Status         int            `json:"status"`
	RetryAfter     retryAfterJSON `json:"retry_after"`
	Timing         *timingJSON    `json:"timing"`
	Provenance     provenance     `json:"provenance"`
	// Run links the record into the run's one chain of records
	// (deletion-detected); omitted only in a legacy run's records.
	Run *runLink `json:"run,omitempty"`
}

type entryFile struct {
	entryBody
	Digest string `json:"digest"`
}

// receiptBody is the canonical content of a receipt; receipt_digest is the
// digest of its encoding/json encoding.
type receiptBody struct {
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
	// Round is the file's upload round when above 1 (after a reupload
	// review); omitted for round 1, the only round before reviews existed.
	Round int `json:"round,omitempty"`
	// Run links the record into the run's one chain of records
	// (deletion-detected); omitted only in a legacy run's records.
	Run *runLink `json:"run,omitempty"`
}

type receiptFile struct {
	receiptBody
	Digest string `json:"digest"`
}

// markerFile is the content of pending-request.json. Its presence, not its
// content, is what matters; the content names the request for a review.
type markerFile struct {
	BackoffVersion string `json:"backoff_version"`
	Method         string `json:"method"`
	URLDigest      string `json:"url_digest"`
	Attempt        int    `json:"attempt"`
	ResendOf       string `json:"resend_of"`
	FileDigest     string `json:"file_digest"`
	BegunAtUTC     int64  `json:"begun_at_utc"`
	// Part is true for a part of an upload ([WithUploadPart]).
	Part bool `json:"part,omitempty"`
	// Host and PID name the worker that holds the marker, for `journal
	// status` (nothing secret).
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
}

// seal encodes body, digests it, and returns the file bytes of full (which
// must embed body and carry the digest, set by setDigest) plus the digest.
func seal(body any, full func(digest string) any) ([]byte, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, "", err
	}
	d := digestOf(b)
	fb, err := json.Marshal(full(d))
	if err != nil {
		return nil, "", err
	}
	return append(fb, '\n'), d, nil
}

func encodeManifest(m manifestBody) ([]byte, string, error) {
	return seal(m, func(d string) any { return manifestFile{m, d} })
}

func encodeEntry(e entryBody) ([]byte, string, error) {
	return seal(e, func(d string) any { return entryFile{e, d} })
}

func encodeReceipt(r receiptBody) ([]byte, string, error) {
	return seal(r, func(d string) any { return receiptFile{r, d} })
}

// decodeStrict decodes data into v; the caller then compares the canonical re-encoding with data byte for byte, which
// also refuses duplicated keys, keys in another case, white space and
// trailing bytes.
func decodeStrict(data []byte, v any) error {
	// Unknown fields need no decoder option: they cannot survive the
	// byte-for-byte comparison with the canonical re-encoding.
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("not valid JSON of this format: %v", err)
	}
	return nil
}

// manifestInfo is what a run manifest says.
type manifestInfo struct {
	legacy     bool
	version    string
	planDigest string
	// genesis is the run.previous_digest of the run's record 1: the
	// manifest's own digest (1.0) or the digest of the manifest file's
	// bytes (legacy).
	genesis string
	// parallel is the shard count of a parallel run's root, else 0.
	parallel int
}

// parseManifest parses run.json. A JSON object without a backoff_version
// key is a legacy manifest: only its plan_digest (when a string) is read.
func parseManifest(data []byte) (manifestInfo, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil || keys == nil {
		return manifestInfo{}, errors.New("not a JSON object")
	}
	if _, ok := keys["backoff_version"]; !ok {
		mi := manifestInfo{legacy: true, genesis: digestOf(data)}
		if raw, ok := keys["plan_digest"]; ok {
			var s string
			if json.Unmarshal(raw, &s) == nil && isDigest(s) {
				mi.planDigest = s
			}
		}
		return mi, nil
	}
	var mf manifestFile
	if err := decodeStrict(data, &mf); err != nil {
		return manifestInfo{}, err
	}
	if mf.BackoffVersion != backoffVersion {
		return manifestInfo{}, fmt.Errorf("unsupported backoff_version %q (want %q)", mf.BackoffVersion, backoffVersion)
	}
	want, d, err := encodeManifest(mf.manifestBody)
	if err != nil {
		return manifestInfo{}, err
	}
	if d != mf.Digest {
		return manifestInfo{}, errors.New("digest does not match the content (edited)")
	}
	if !bytes.Equal(want, data) {
		return manifestInfo{}, errors.New("not in canonical form (edited)")
	}
	if !isDigest(mf.PlanDigest) {
		return manifestInfo{}, errors.New("plan_digest is not a sha256 digest")
	}
	if mf.CreatedAtUTC <= 0 {
		return manifestInfo{}, errors.New("created_at_utc is not a positive Unix time")
	}
	if p := mf.Parallel; p != 0 && (p < minParallel || p > maxParallel) {
		return manifestInfo{}, fmt.Errorf("parallel %d is not %d to %d", p, minParallel, maxParallel)
	}
	return manifestInfo{version: mf.BackoffVersion, planDigest: mf.PlanDigest, genesis: mf.Digest, parallel: mf.Parallel}, nil
}

// parseEntry parses and self-verifies a backoff entry: format, canonical
// form, own digest and field validity. Sequence, plan and run link are
// checked by the caller, which knows the neighbours.
func parseEntry(data []byte) (entryFile, error) {
	var ef entryFile
	if err := decodeStrict(data, &ef); err != nil {
		return entryFile{}, err
	}
	want, d, err := encodeEntry(ef.entryBody)
	if err != nil {
		return entryFile{}, err
	}
	if d != ef.Digest {
		return entryFile{}, errors.New("digest does not match the content (edited)")
	}
	if !bytes.Equal(want, data) {
		return entryFile{}, errors.New("not in canonical form (edited)")
	}
	if ef.BackoffVersion != backoffVersion {
		return entryFile{}, fmt.Errorf("unsupported backoff_version %q", ef.BackoffVersion)
	}
	if err := validEntry(ef.entryBody); err != nil {
		return entryFile{}, err
	}
	return ef, nil
}

// parseReceipt parses and self-verifies a receipt.
func parseReceipt(data []byte) (receiptFile, error) {
	var rf receiptFile
	if err := decodeStrict(data, &rf); err != nil {
		return receiptFile{}, err
	}
	want, d, err := encodeReceipt(rf.receiptBody)
	if err != nil {
		return receiptFile{}, err
	}
	if d != rf.Digest {
		return receiptFile{}, errors.New("digest does not match the content (edited)")
	}
	if !bytes.Equal(want, data) {
		return receiptFile{}, errors.New("not in canonical form (edited)")
	}
	r := rf.receiptBody
	switch {
	case !isDigest(r.FileDigest):
		return receiptFile{}, errors.New("file_digest is not a sha256 digest")
	case r.PlanDigest != "" && !isDigest(r.PlanDigest):
		return receiptFile{}, errors.New("plan_digest is not a sha256 digest")
	case r.ACK != httprule.IsSuccess(r.Status):
		return receiptFile{}, errors.New("ack does not agree with status")
	case r.Round < 0 || r.Round == 1 || r.Round > maxRounds:
		return receiptFile{}, fmt.Errorf("round %d outside 2..%d (round 1 is written without the field)", r.Round, maxRounds)
	}
	if err := validRequest(r.Method, r.URLDigest, r.Attempt, r.ResendOf); err != nil {
		return receiptFile{}, err
	}
	if err := validLink(r.Run); err != nil {
		return receiptFile{}, err
	}
	return rf, nil
}

// parseMarker reads what it can of pending-request.json.
func parseMarker(data []byte) (markerFile, bool) {
	var m markerFile
	if json.Unmarshal(data, &m) != nil || (m.FileDigest != "" && !isDigest(m.FileDigest)) {
		return markerFile{}, false
	}
	return m, true
}

var knownKinds = map[string]bool{
	string(readrecovery.RetryAfterSeconds):   true,
	string(readrecovery.RetryAfterDate):      true,
	string(readrecovery.RetryAfterMissing):   true,
	string(readrecovery.RetryAfterInvalid):   true,
	string(readrecovery.RetryAfterOverlong):  true,
	string(readrecovery.RetryAfterOversized): true,
}

// validRequest checks the request fields shared by markers, entries and
// receipts: nothing but a method token and digests, so that no URL, query
// or credential can be stored (nothing-secret-leaves).
func validRequest(method, urlDigest string, attempt int, resendOf string) error {
	if method == "" || len(method) > 16 {
		return fmt.Errorf("method %q is not an HTTP method", method)
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; c < 'A' || c > 'Z' {
			return fmt.Errorf("method %q is not an HTTP method", method)
		}
	}
	if !isDigest(urlDigest) {
		return errors.New("url_digest is not a sha256 digest")
	}
	if attempt < 1 {
		return fmt.Errorf("attempt %d is not positive", attempt)
	}
	if resendOf != "" && !isDigest(resendOf) {
		return errors.New("resend_of is not a sha256 digest")
	}
	return nil
}

// validEntry checks an entry's fields (not its neighbours).
func validEntry(e entryBody) error {
	if err := validRequest(e.Method, e.URLDigest, e.Provenance.Attempt, e.Provenance.ResendOf); err != nil {
		return err
	}
	switch {
	case e.Sequence < 1 || e.Sequence > maxEntries:
		return fmt.Errorf("sequence %d outside 1..%d", e.Sequence, maxEntries)
	case e.PlanDigest != "" && !isDigest(e.PlanDigest):
		return errors.New("plan_digest is not a sha256 digest")
	case e.RequestID != redact.ID(e.RequestID):
		return errors.New("request_id is not sanitized")
	case e.Status < 100 || e.Status > 599:
		return fmt.Errorf("status %d is not an HTTP status", e.Status)
	case e.Provenance.FileDigest != "" && !isDigest(e.Provenance.FileDigest):
		return errors.New("provenance.file_digest is not a sha256 digest")
	}
	if err := validLink(e.Run); err != nil {
		return err
	}
	return validRetryAfter(e.RetryAfter, e.Timing)
}

// validRetryAfter checks the typed Retry-After and its timing: a known kind,
// a non-negative value that is 0 for every kind but seconds and date, and a
// timing whose not_before is exactly received + delay.
func validRetryAfter(ra retryAfterJSON, t *timingJSON) error {
	if !knownKinds[ra.Kind] {
		return fmt.Errorf("retry_after kind %q is unknown", ra.Kind)
	}
	if ra.Value < 0 {
		return fmt.Errorf("retry_after value %d is negative", ra.Value)
	}
	if ra.Value != 0 && ra.Kind != string(readrecovery.RetryAfterSeconds) && ra.Kind != string(readrecovery.RetryAfterDate) {
		return fmt.Errorf("retry_after kind %q must have value 0", ra.Kind)
	}
	if t == nil {
		return nil
	}
	switch {
	case t.ReceivedAtUTC <= 0:
		return fmt.Errorf("timing received_at_utc %d is not a positive Unix time", t.ReceivedAtUTC)
	case t.ServerDelaySeconds < 0:
		return fmt.Errorf("timing server_delay_seconds %d is negative", t.ServerDelaySeconds)
	case t.ReceivedAtUTC > unixtime.Max-t.ServerDelaySeconds:
		return errors.New("timing overflows Unix seconds")
	case t.NotBeforeUTC != t.ReceivedAtUTC+t.ServerDelaySeconds:
		return fmt.Errorf("timing not_before_utc %d is not received_at_utc + server_delay_seconds", t.NotBeforeUTC)
	}
	return nil
}

// representable reports whether a timing lies within the one bound on
// representable times the parser, the journal and the command share
// ([unixtime.Max], the end of year 9999): a timing beyond it is no timing
// (the entry is kept without one and the run is unresolved), never a
// failure to record the restriction.
// An invalid timing (a negative delay, a not-before that is not received
// plus delay) is not this: it is refused by validEntry.
func representable(t *readrecovery.RetryAfterTiming) bool {
	return t.ReceivedAtUTC <= unixtime.Max && t.NotBeforeUTC <= unixtime.Max &&
		(t.ServerDelaySeconds < 0 || t.ReceivedAtUTC <= unixtime.Max-t.ServerDelaySeconds)
}

// untimed returns why an entry cannot bound its restriction in time (so the
// run is unresolved), or "".
func untimed(e entryBody) string {
	switch {
	case e.RetryAfter.Kind == string(readrecovery.RetryAfterOversized):
		return "retry_after oversized: no representable delay (unresolved)"
	case e.Timing == nil:
		return fmt.Sprintf("retry_after %s without timing: unrepresentable or unknown delay (unresolved)", e.RetryAfter.Kind)
	}
	return ""
}

func marshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// partBody is the canonical content of a part receipt: the outcome of one
// request marked [WithUploadPart]. Its 2xx is never the file's ACK, so the
// field is "accepted", not "ack".
type partBody struct {
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
	// Run links the record into the run's one chain of records
	// (deletion-detected); omitted only in a legacy run's records.
	Run *runLink `json:"run,omitempty"`
}

type partFile struct {
	partBody
	Digest string `json:"digest"`
}

// reviewEvidence is what a review saw of its file: the number of backoff
// entries of the run and the digest of the last one, the number of the
// file's part receipts and the digest of the last one, and the digest of
// the commit receipt of the file's round ("" when none). A review applies
// to these records only: later ones belong to the next round.
type reviewEvidence struct {
	Entries         int    `json:"entries"`
	LastEventDigest string `json:"last_event_digest"`
	Parts           int    `json:"parts"`
	LastPartDigest  string `json:"last_part_digest"`
	ReceiptDigest   string `json:"receipt_digest"`
}

// reviewBody is the canonical content of review-NNNN.json: an operator's
// decision about one unknown file (docs/policy.md: operator-review).
type reviewBody struct {
	ReviewVersion string         `json:"review_version"`
	Sequence      int            `json:"sequence"`
	PlanDigest    string         `json:"plan_digest"`
	FileDigest    string         `json:"file_digest"`
	Decision      Decision       `json:"decision"`
	Reviewer      string         `json:"reviewer"`
	ReviewedAtUTC int64          `json:"reviewed_at_utc"`
	Note          string         `json:"note"`
	Evidence      reviewEvidence `json:"evidence"`
	// Marker is set for a pending review (decision "pending") only, and
	// omitted otherwise. A pending review's file_digest is "": the file is
	// the marker's.
	Marker *markerEvidence `json:"marker,omitempty"`
	// Restriction is set for a restriction review (decision
	// "restriction") only: the operator's bound on an entry whose
	// restriction has no timing.
	Restriction *restrictionEvidence `json:"restriction,omitempty"`
	// Run links the record into the run's one chain of records
	// (deletion-detected); omitted only in a legacy run's records.
	Run *runLink `json:"run,omitempty"`
}

type reviewFile struct {
	reviewBody
	Digest string `json:"digest"`
}

// markerEvidence is what a pending review (pending-review) saw of the abandoned
// marker it resolves: the digest of the marker's bytes (the review applies
// to that marker only), what the marker names (empty when its content is
// unreadable), and the not-before the run waits for: the review time plus
// the 30 s wait ceiling, or the later time the operator gave, since the
// lost response's restriction is unknown.
type markerEvidence struct {
	Digest       string `json:"digest"`
	Method       string `json:"method"`
	URLDigest    string `json:"url_digest"`
	FileDigest   string `json:"file_digest"`
	Part         bool   `json:"part"`
	BegunAtUTC   int64  `json:"begun_at_utc"`
	NotBeforeUTC int64  `json:"not_before_utc"`
}

// restrictionEvidence is what a restriction review binds: the backoff
// entry without timing (by name and event digest) and the not-before the
// operator gives it, at least the review time plus the 30 s wait ceiling.
type restrictionEvidence struct {
	Entry        string `json:"entry"`
	EventDigest  string `json:"event_digest"`
	NotBeforeUTC int64  `json:"not_before_utc"`
}

// pendingWaitSeconds is the least a pending review makes the run wait:
// the 30 s wait ceiling of the policy, the longest restriction a lost
// response could have carried that the run would have waited for.
const pendingWaitSeconds = 30

// reviewVersion is the format version of a review entry.
const reviewVersion = "1.0"

func encodePart(p partBody) ([]byte, string, error) {
	return seal(p, func(d string) any { return partFile{p, d} })
}

func encodeReview(r reviewBody) ([]byte, string, error) {
	return seal(r, func(d string) any { return reviewFile{r, d} })
}

// parsePart parses and self-verifies a part receipt. The run link, the
// plan and the name are checked by the caller.
func parsePart(data []byte) (partFile, error) {
	var pf partFile
	if err := decodeStrict(data, &pf); err != nil {
		return partFile{}, err
	}
	want, d, err := encodePart(pf.partBody)
	if err != nil {
		return partFile{}, err
	}
	if d != pf.Digest {
		return partFile{}, errors.New("digest does not match the content (edited)")
	}
	if !bytes.Equal(want, data) {
		return partFile{}, errors.New("not in canonical form (edited)")
	}
	p := pf.partBody
	switch {
	case !isDigest(p.FileDigest):
		return partFile{}, errors.New("file_digest is not a sha256 digest")
	case p.PlanDigest != "" && !isDigest(p.PlanDigest):
		return partFile{}, errors.New("plan_digest is not a sha256 digest")
	case p.Part < 1 || p.Part > maxParts:
		return partFile{}, fmt.Errorf("part %d outside 1..%d", p.Part, maxParts)
	case p.Accepted != httprule.IsSuccess(p.Status):
		return partFile{}, errors.New("accepted does not agree with status")
	case httprule.IsThrottled(p.Status):
		return partFile{}, errors.New("status 429 belongs in a backoff entry, not a part receipt")
	case p.RequestID != redact.ID(p.RequestID):
		return partFile{}, errors.New("request_id is not sanitized")
	}
	if err := validRequest(p.Method, p.URLDigest, p.Attempt, p.ResendOf); err != nil {
		return partFile{}, err
	}
	if err := validLink(p.Run); err != nil {
		return partFile{}, err
	}
	return pf, nil
}

// parseReview parses and self-verifies a review entry. Sequence, run link,
// plan and evidence are checked by the caller.
func parseReview(data []byte) (reviewFile, error) {
	var rf reviewFile
	if err := decodeStrict(data, &rf); err != nil {
		return reviewFile{}, err
	}
	want, d, err := encodeReview(rf.reviewBody)
	if err != nil {
		return reviewFile{}, err
	}
	if d != rf.Digest {
		return reviewFile{}, errors.New("digest does not match the content (edited)")
	}
	if !bytes.Equal(want, data) {
		return reviewFile{}, errors.New("not in canonical form (edited)")
	}
	r := rf.reviewBody
	ev := r.Evidence
	switch {
	case r.ReviewVersion != reviewVersion:
		return reviewFile{}, fmt.Errorf("unsupported review_version %q", r.ReviewVersion)
	case r.Sequence < 1 || r.Sequence > maxReviews:
		return reviewFile{}, fmt.Errorf("sequence %d outside 1..%d", r.Sequence, maxReviews)
	case r.PlanDigest != "" && !isDigest(r.PlanDigest):
		return reviewFile{}, errors.New("plan_digest is not a sha256 digest")
	case r.Decision == decisionPending:
		if err := validMarkerEvidence(r); err != nil {
			return reviewFile{}, err
		}
		if r.Restriction != nil {
			return reviewFile{}, errors.New("restriction is set on a pending review")
		}
	case r.Marker != nil:
		return reviewFile{}, errors.New("marker is set on a review that is not pending")
	case r.Decision == decisionRestriction:
		rs := r.Restriction
		switch {
		case rs == nil:
			return reviewFile{}, errors.New("a restriction review without its restriction")
		case r.FileDigest != "":
			return reviewFile{}, errors.New("a restriction review names no file")
		case !isRecordName(rs.Entry) || !isDigest(rs.EventDigest):
			return reviewFile{}, errors.New("restriction does not name an entry and its event digest")
		case rs.NotBeforeUTC < r.ReviewedAtUTC+pendingWaitSeconds || rs.NotBeforeUTC > unixtime.Max:
			return reviewFile{}, fmt.Errorf("restriction.not_before_utc %d is not at least reviewed_at_utc + %d s", rs.NotBeforeUTC, pendingWaitSeconds)
		}
	case r.Restriction != nil:
		return reviewFile{}, errors.New("restriction is set on a review of a file")
	case !isDigest(r.FileDigest):
		return reviewFile{}, errors.New("file_digest is not a sha256 digest")
	case r.Decision != DecisionReupload && r.Decision != DecisionSkip:
		return reviewFile{}, fmt.Errorf("decision %q is not reupload, skip or pending", r.Decision)
	case r.Reviewer == "" || r.Reviewer != sanitizeNote(r.Reviewer, maxReviewerBytes):
		return reviewFile{}, errors.New("reviewer is empty or not sanitized")
	case r.Note != sanitizeNote(r.Note, maxNoteBytes):
		return reviewFile{}, errors.New("note is not sanitized")
	case r.ReviewedAtUTC <= 0 || r.ReviewedAtUTC > unixtime.Max:
		return reviewFile{}, fmt.Errorf("reviewed_at_utc %d is not a Unix time", r.ReviewedAtUTC)
	case ev.Entries < 0 || ev.Entries > maxEntries || (ev.Entries == 0) != (ev.LastEventDigest == ""):
		return reviewFile{}, errors.New("evidence entries and last_event_digest disagree")
	case ev.Parts < 0 || ev.Parts > maxParts || (ev.Parts == 0) != (ev.LastPartDigest == ""):
		return reviewFile{}, errors.New("evidence parts and last_part_digest disagree")
	case ev.LastEventDigest != "" && !isDigest(ev.LastEventDigest),
		ev.LastPartDigest != "" && !isDigest(ev.LastPartDigest),
		ev.ReceiptDigest != "" && !isDigest(ev.ReceiptDigest):
		return reviewFile{}, errors.New("evidence holds a digest that is not sha256")
	}
	if err := validLink(r.Run); err != nil {
		return reviewFile{}, err
	}
	return rf, nil
}

// validMarkerEvidence checks the fields of a pending review.
func validMarkerEvidence(r reviewBody) error {
	m := r.Marker
	switch {
	case m == nil:
		return errors.New("a pending review without its marker")
	case r.FileDigest != "":
		return errors.New("a pending review names its file in marker.file_digest only")
	case !isDigest(m.Digest):
		return errors.New("marker.digest is not a sha256 digest")
	case m.FileDigest != "" && !isDigest(m.FileDigest):
		return errors.New("marker.file_digest is not a sha256 digest")
	case m.URLDigest != "" && !isDigest(m.URLDigest):
		return errors.New("marker.url_digest is not a sha256 digest")
	case m.Method != "" && m.Method != sanitizeNote(m.Method, 16):
		return errors.New("marker.method is not sanitized")
	case m.BegunAtUTC < 0 || m.BegunAtUTC > unixtime.Max:
		return fmt.Errorf("marker.begun_at_utc %d is not a Unix time", m.BegunAtUTC)
	case m.NotBeforeUTC < r.ReviewedAtUTC+pendingWaitSeconds || m.NotBeforeUTC > unixtime.Max:
		return fmt.Errorf("marker.not_before_utc %d is not at least reviewed_at_utc + %d s", m.NotBeforeUTC, pendingWaitSeconds)
	}
	return nil
}

// parsePlanList parses plan.json: exactly the canonical
// {"files":[...]} of sorted, distinct file identity digests whose digest
// is the run's plan digest (see digestOfPlan), plus "\n".
func parsePlanList(data []byte) ([]string, string, error) {
	var pl struct {
		Files []string `json:"files"`
	}
	if err := decodeStrict(data, &pl); err != nil {
		return nil, "", err
	}
	if pl.Files == nil {
		return nil, "", errors.New("files is not a list")
	}
	for i, f := range pl.Files {
		if !isDigest(f) {
			return nil, "", fmt.Errorf("files[%d] is not a sha256 digest", i)
		}
		if i > 0 && pl.Files[i-1] >= f {
			return nil, "", errors.New("files are not sorted and distinct")
		}
	}
	want, err := marshalLine(pl)
	if err != nil {
		return nil, "", err
	}
	if !bytes.Equal(want, data) {
		return nil, "", errors.New("not in canonical form (edited)")
	}
	return pl.Files, digestOf(want[:len(want)-1]), nil
}

// encodePlanList returns the content of plan.json for a plan's sorted
// file identity digests.
func encodePlanList(digests []string) ([]byte, error) {
	return marshalLine(struct {
		Files []string `json:"files"`
	}{digests})
}

// Bounds of the free text of a review.
const (
	maxNoteBytes     = 256
	maxReviewerBytes = 64
)

// sanitizeNote makes free text safe to store and print: valid UTF-8,
// printable characters only (every control character, including newline
// and ESC, becomes a space), any URL query or userinfo removed, runs of
// spaces collapsed, trimmed, and cut to at most limit bytes on a rune
// boundary. It returns a fixed point (sanitizing its result changes
// nothing), so a loader can check that a stored text is sanitized.
func sanitizeNote(s string, limit int) string {
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

// runLink is a record's place in the run's one sequence of records
// (deletion-detected): every backoff entry, commit receipt, part
// receipt and review written since carries its number (1, 2, …, without
// gaps across the kinds) and the name and digest of the record before it
// (run.json and the manifest's digest for record 1), and the last record
// is named by the run's head (head-NNNN.json). So removing any one record
// leaves a gap that the record after it names, or a head that names a
// missing record, and removing the head leaves the last record without
// one.
type runLink struct {
	Seq            int    `json:"seq"`
	Previous       string `json:"previous"`
	PreviousDigest string `json:"previous_digest"`
}

// maxRunSeq bounds the sequence numbers (the file limit bounds them first).
const maxRunSeq = 9999

func validLink(l *runLink) error {
	switch {
	case l == nil:
		return nil
	case l.Seq < 1 || l.Seq > maxRunSeq:
		return fmt.Errorf("run.seq %d outside 1..%d", l.Seq, maxRunSeq)
	case (l.Seq == 1) != (l.Previous == manifestName):
		return errors.New("run.previous must be run.json exactly for record 1")
	case l.Seq > 1 && !isRecordName(l.Previous):
		return errors.New("run.previous is not a record's name")
	case !isDigest(l.PreviousDigest):
		return errors.New("run.previous_digest is not a sha256 digest")
	}
	return nil
}

// headBody is the canonical content of head-NNNN.json: the run's last
// record, by sequence number, name and digest.
type headBody struct {
	HeadVersion  string `json:"head_version"`
	Seq          int    `json:"seq"`
	Record       string `json:"record"`
	RecordDigest string `json:"record_digest"`
}

type headFile struct {
	headBody
	Digest string `json:"digest"`
}

// headVersion is the format version of a run's head.
const headVersion = "1.0"

func encodeHead(h headBody) ([]byte, string, error) {
	return seal(h, func(d string) any { return headFile{h, d} })
}

// parseHead parses and self-verifies a head.
func parseHead(data []byte) (headFile, error) {
	var hf headFile
	if err := decodeStrict(data, &hf); err != nil {
		return headFile{}, err
	}
	want, d, err := encodeHead(hf.headBody)
	if err != nil {
		return headFile{}, err
	}
	switch {
	case d != hf.Digest:
		return headFile{}, errors.New("digest does not match the content (edited)")
	case !bytes.Equal(want, data):
		return headFile{}, errors.New("not in canonical form (edited)")
	case hf.HeadVersion != headVersion:
		return headFile{}, fmt.Errorf("unsupported head_version %q", hf.HeadVersion)
	case hf.Seq < 1 || hf.Seq > maxRunSeq:
		return headFile{}, fmt.Errorf("seq %d outside 1..%d", hf.Seq, maxRunSeq)
	case !isRecordName(hf.Record):
		return headFile{}, errors.New("record is not a record's name")
	case !isDigest(hf.RecordDigest):
		return headFile{}, errors.New("record_digest is not a sha256 digest")
	}
	return hf, nil
}
