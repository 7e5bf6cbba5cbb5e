package scopecard

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)

// cardSeeds are the decoder's table: valid cards and the corrupt shapes
// the directory store's tests write.
var cardSeeds = []string{
	string(EncodeCard(Card{})),
	string(EncodeCard(Card{NotBefore: t0.Add(1500 * time.Millisecond), RequestID: "req-1", Rate: 2.5, Burst: 10, Learnt: t0})),
	string(EncodeCard(Card{NotBefore: Time(MaxMillis), RequestID: "sha256:0123456789abcdef", Rate: 1e300, Learnt: Time(1)})),
	`{"v":1,"not_before_ms":1,"request_id":"","rate":0,"burst":0,"learnt_ms":0,"extra":1}`,
	`{"v":2,"not_before_ms":1,"request_id":"","rate":0,"burst":0,"learnt_ms":0}`,
	`{"v":1,"not_before_ms":-1}`,
	`{"v":1,"not_before_ms":253402300800000}`,
	`{"v":1,"rate":-1}`,
	`{"v":1,"request_id":"a b"}`,
	`{"v":1} {}`,
	`null`,
	`not json`,
	``,
}

// FuzzScopeCardDecode: the card decoder never panics; what it accepts
// re-encodes to a card it decodes to the same value, and every refusal is
// a *CorruptError.
func FuzzScopeCardDecode(f *testing.F) {
	for _, s := range cardSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCard("card.json", b)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || c != (Card{}) {
				t.Fatalf("refusal %v (%T) with card %+v, want a *CorruptError and the zero card", err, err, c)
			}
			return
		}
		again, err := DecodeCard("card.json", EncodeCard(c))
		if err != nil || again != c {
			t.Fatalf("re-encoded %+v decodes to %+v (%v)", c, again, err)
		}
	})
}

// FuzzScopeMemberDecode: the same for member records.
func FuzzScopeMemberDecode(f *testing.F) {
	f.Add(EncodeMember(Member{ID: "proc-1", Demand: 2, Share: 1.5, Lease: t0.Add(time.Minute)}, t0))
	f.Add([]byte(`{"v":1,"id":"","lease_ms":1,"written_ms":1}`))
	f.Add([]byte(`{"v":1,"id":"../x","lease_ms":1,"written_ms":1}`))
	f.Add([]byte(`{"v":1,"id":"p","lease_ms":1,"written_ms":1,"x":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, w, err := DecodeMember("m.json", b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal %v, want ErrCorrupt", err)
			}
			return
		}
		m2, w2, err := DecodeMember("m.json", EncodeMember(m, w))
		if err != nil || m2 != m || !w2.Equal(w) {
			t.Fatalf("re-encoded %+v decodes to %+v (%v)", m, m2, err)
		}
	})
}

// Every seed of the table is decoded as the table says.
func TestDecodeCardTable(t *testing.T) {
	valid := 3
	for i, s := range cardSeeds {
		_, err := DecodeCard("card.json", []byte(s))
		if (err == nil) != (i < valid) {
			t.Errorf("seed %d %q: err = %v, want valid %v", i, s, err, i < valid)
		}
	}
	big := bytes.Repeat([]byte(" "), MaxCardBytes+1)
	if _, err := DecodeCard("card.json", big); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("oversized: %v", err)
	}
}

// Stale: a lease ended more than ten of its periods ago (at least 10 s).
func TestStale(t *testing.T) {
	m := Member{ID: "p", Lease: t0}
	for _, tc := range []struct {
		written, now time.Time
		want         bool
	}{
		{t0.Add(-time.Minute), t0.Add(10 * time.Minute), false},
		{t0.Add(-time.Minute), t0.Add(10*time.Minute + time.Millisecond), true},
		{t0, t0.Add(10 * time.Second), false},
		{t0, t0.Add(10*time.Second + time.Millisecond), true},
	} {
		if got := Stale(m, tc.written, tc.now); got != tc.want {
			t.Errorf("Stale(written %v, now %v) = %v, want %v", tc.written.Sub(t0), tc.now.Sub(t0), got, tc.want)
		}
	}
}
