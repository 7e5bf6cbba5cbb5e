// Package scopecard is the one model of a scope store's records: the card
// of a scope and its merge rule, a process's member record, their JSON
// encodings and the hashed names a store files them under. The root
// package's directory store and rrazure's Blob store both use it, so that
// every store merges by the same function (rrredis mirrors [Merge] in Lua
// and runs the same table, scopestoretest.MergeCases).
//
// Times are kept to the millisecond, as Unix milliseconds (0: none), so
// that every value is an integer a double holds exactly (Redis's Lua
// numbers): the largest, 9999-12-31T23:59:59.999Z, is below 2^53.
package scopecard

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// Card is what a fleet knows of one scope (readrecovery.ScopeCard, field
// for field, so that the two convert).
type Card struct {
	NotBefore time.Time
	RequestID string
	Rate      float64
	Burst     float64
	Learnt    time.Time
}

// Member is one process's record in a scope (readrecovery.ScopeMember,
// field for field).
type Member struct {
	ID     string
	Demand float64
	Share  float64
	Lease  time.Time
}

// Merge is the merge rule of every store: the later NotBefore wins with
// its RequestID (an equal or earlier one changes nothing, so a not-before
// is never shortened); the later Learnt wins with its Rate and Burst (an
// equal or earlier one changes nothing). A zero in merges nothing. It is
// pure: both cards are taken as they are (see [Normal]).
func Merge(stored, in Card) Card {
	out := stored
	if in.NotBefore.After(stored.NotBefore) {
		out.NotBefore, out.RequestID = in.NotBefore, in.RequestID
	}
	if in.Learnt.After(stored.Learnt) {
		out.Rate, out.Burst, out.Learnt = in.Rate, in.Burst, in.Learnt
	}
	return out
}

// MaxMillis is the largest time a record holds, in Unix milliseconds:
// the last millisecond of [unixtime.Max].
const MaxMillis = unixtime.Max*1000 + 999

// MaxIDLen is the longest member ID a record holds.
const MaxIDLen = 64

// Size caps of the encodings: a record longer than these is refused
// before it is read further.
const (
	MaxCardBytes   = 1024
	MaxMemberBytes = 512
)

// Version is the records' "v": a record of another version is corrupt.
const Version = 1

var (
	// ErrInvalid marks an argument of an exchange that no record can hold.
	ErrInvalid = errors.New("invalid argument")
	// ErrCorrupt marks a stored record that fails to decode.
	ErrCorrupt = errors.New("corrupt record")
)

// CorruptError is a stored record that failed to decode: Name is the
// record's name in its store (hashed, no scope text), Reason what is
// wrong. It wraps [ErrCorrupt].
type CorruptError struct {
	Name   string
	Reason string
}

func (e *CorruptError) Error() string { return "corrupt " + e.Name + ": " + e.Reason }
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Millis converts t to Unix milliseconds (0 for the zero time), checking
// that a record can hold it.
func Millis(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	ms := t.UnixMilli()
	if ms <= 0 || ms > MaxMillis {
		return 0, fmt.Errorf("%w: time %s outside 1970-01-01 .. 9999-12-31", ErrInvalid, t.UTC().Format(time.RFC3339))
	}
	return ms, nil
}

// Time converts Unix milliseconds back (0: the zero time), in UTC.
func Time(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Normal returns t as a record holds it: UTC, truncated to the
// millisecond, without a monotonic reading; the zero time stays zero.
func Normal(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return Time(t.UnixMilli())
}

// CheckCard checks that c can be stored and returns it normalised
// ([Normal] times). A rate or burst must be finite and not negative; a
// request ID must be one that redact.ID keeps as it is.
func CheckCard(c Card) (Card, error) {
	if _, err := Millis(c.NotBefore); err != nil {
		return Card{}, fmt.Errorf("not-before: %w", err)
	}
	if _, err := Millis(c.Learnt); err != nil {
		return Card{}, fmt.Errorf("learnt: %w", err)
	}
	if !rateOK(c.Rate) || !rateOK(c.Burst) {
		return Card{}, fmt.Errorf("%w: rate and burst must be finite and not negative", ErrInvalid)
	}
	if c.RequestID != "" && redact.ID(c.RequestID) != c.RequestID {
		return Card{}, fmt.Errorf("%w: request ID is not sanitized (redact.ID)", ErrInvalid)
	}
	c.NotBefore, c.Learnt = Normal(c.NotBefore), Normal(c.Learnt)
	return c, nil
}

// CheckMember checks that m can be stored and returns it normalised. An
// ID is 1 to [MaxIDLen] bytes of letters, digits, '-', '_' and '.';
// the zero Member (no record) passes.
func CheckMember(m Member) (Member, error) {
	if m == (Member{}) {
		return m, nil
	}
	if !idOK(m.ID) {
		return Member{}, fmt.Errorf("%w: member ID must be 1 to %d letters, digits, '-', '_' or '.'", ErrInvalid, MaxIDLen)
	}
	if !rateOK(m.Demand) || !rateOK(m.Share) {
		return Member{}, fmt.Errorf("%w: demand and share must be finite and not negative", ErrInvalid)
	}
	if _, err := Millis(m.Lease); err != nil {
		return Member{}, fmt.Errorf("lease: %w", err)
	}
	m.Lease = Normal(m.Lease)
	return m, nil
}

func rateOK(f float64) bool { return f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }

func idOK(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Name is the name a store files a scope under: the first 32 hex digits
// of the SHA-256 of the scope's text, so that no name carries the text
// (a URL's path or query) itself. A member ID is hashed the same way for
// its record's name.
func Name(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:16])
}

// cardJSON is a card on disk or in a blob.
type cardJSON struct {
	V         int     `json:"v"`
	NotBefore int64   `json:"not_before_ms"`
	RequestID string  `json:"request_id"`
	Rate      float64 `json:"rate"`
	Burst     float64 `json:"burst"`
	Learnt    int64   `json:"learnt_ms"`
}

// memberJSON is a member record. Written is when its writer wrote it
// (store time), so that a reader can tell how long its lease was.
type memberJSON struct {
	V       int     `json:"v"`
	ID      string  `json:"id"`
	Demand  float64 `json:"demand"`
	Share   float64 `json:"share"`
	Lease   int64   `json:"lease_ms"`
	Written int64   `json:"written_ms"`
}

// EncodeCard encodes a card that [CheckCard] passed.
func EncodeCard(c Card) []byte {
	nb, _ := Millis(c.NotBefore)
	l, _ := Millis(c.Learnt)
	b, _ := json.Marshal(cardJSON{V: Version, NotBefore: nb, RequestID: c.RequestID, Rate: c.Rate, Burst: c.Burst, Learnt: l})
	return append(b, '\n')
}

// DecodeCard decodes a card; name is the record's name for the error.
// Anything but one JSON object of this version with known fields and
// values [CheckCard] accepts is a [*CorruptError].
func DecodeCard(name string, b []byte) (Card, error) {
	var j cardJSON
	if err := decodeStrict(b, MaxCardBytes, &j); err != nil {
		return Card{}, &CorruptError{Name: name, Reason: err.Error()}
	}
	if j.V != Version {
		return Card{}, &CorruptError{Name: name, Reason: fmt.Sprintf("version %d, want %d", j.V, Version)}
	}
	if !msOK(j.NotBefore) || !msOK(j.Learnt) {
		return Card{}, &CorruptError{Name: name, Reason: "time out of range"}
	}
	c := Card{NotBefore: Time(j.NotBefore), RequestID: j.RequestID, Rate: j.Rate, Burst: j.Burst, Learnt: Time(j.Learnt)}
	if _, err := CheckCard(c); err != nil {
		return Card{}, &CorruptError{Name: name, Reason: err.Error()}
	}
	return c, nil
}

// EncodeMember encodes a member that [CheckMember] passed, written at
// store time now.
func EncodeMember(m Member, now time.Time) []byte {
	l, _ := Millis(m.Lease)
	w, _ := Millis(now)
	b, _ := json.Marshal(memberJSON{V: Version, ID: m.ID, Demand: m.Demand, Share: m.Share, Lease: l, Written: w})
	return append(b, '\n')
}

// DecodeMember decodes a member record and when it was written; name is
// the record's name for the error.
func DecodeMember(name string, b []byte) (Member, time.Time, error) {
	var j memberJSON
	if err := decodeStrict(b, MaxMemberBytes, &j); err != nil {
		return Member{}, time.Time{}, &CorruptError{Name: name, Reason: err.Error()}
	}
	if j.V != Version {
		return Member{}, time.Time{}, &CorruptError{Name: name, Reason: fmt.Sprintf("version %d, want %d", j.V, Version)}
	}
	if !msOK(j.Lease) || !msOK(j.Written) || j.ID == "" {
		return Member{}, time.Time{}, &CorruptError{Name: name, Reason: "no ID, or a time out of range"}
	}
	m := Member{ID: j.ID, Demand: j.Demand, Share: j.Share, Lease: Time(j.Lease)}
	if _, err := CheckMember(m); err != nil {
		return Member{}, time.Time{}, &CorruptError{Name: name, Reason: err.Error()}
	}
	return m, Time(j.Written), nil
}

// Stale reports whether a member record, written at written with lease
// m.Lease, may be removed at now: its lease ended more than ten of its
// own lease periods ago (at least ten seconds' worth).
func Stale(m Member, written, now time.Time) bool {
	period := max(m.Lease.Sub(written), time.Second)
	return now.Sub(m.Lease) > 10*period
}

func msOK(ms int64) bool { return ms >= 0 && ms <= MaxMillis }

// decodeStrict decodes exactly one JSON object of at most limit bytes
// into v, refusing unknown fields and trailing data.
func decodeStrict(b []byte, limit int, v any) error {
	if len(b) > limit {
		return fmt.Errorf("%d bytes, more than %d", len(b), limit)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the record")
	}
	return nil
}

// ReadCapped reads at most limit bytes from r and fails, without reading
// further, when there are more.
func ReadCapped(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	return b, nil
}
