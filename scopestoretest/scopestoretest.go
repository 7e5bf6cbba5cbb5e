// Package scopestoretest is the conformance suite of a
// [readrecovery.ScopeStore]: every store of this module (the directory,
// Redis and Blob stores) runs [Test], and a store of one's own can too:
//
//	func TestMyStore(t *testing.T) {
//		scopestoretest.Test(t, func(t *testing.T) readrecovery.ScopeStore { return newMyStore(t) })
//	}
//
// [MergeCases] is the merge rule's step table, which the suite runs
// through Exchange (and the root package through its merge function), and
// [NoScopeText] checks what a store wrote for a scope's text.
package scopestoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// T0 is the fixed time of [MergeCases]: a card's times are t0 plus whole
// milliseconds.
var T0 = time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)

// A MergeCase is one row of the merge rule's table: Stored merged with
// In gives Want. Stored is a card that merges onto an empty store as it
// is.
type MergeCase struct {
	Name             string
	Stored, In, Want readrecovery.ScopeCard
}

// MergeCases returns the merge rule's table at fixed times around [T0].
func MergeCases() []MergeCase {
	at := func(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }
	nb := func(ms int, id string) readrecovery.ScopeCard {
		return readrecovery.ScopeCard{NotBefore: at(ms), RequestID: id}
	}
	pace := func(rate, burst float64, ms int) readrecovery.ScopeCard {
		return readrecovery.ScopeCard{Rate: rate, Burst: burst, Learnt: at(ms)}
	}
	both := func(n, p readrecovery.ScopeCard) readrecovery.ScopeCard {
		n.Rate, n.Burst, n.Learnt = p.Rate, p.Burst, p.Learnt
		return n
	}
	return []MergeCase{
		{"empty-takes-not-before", readrecovery.ScopeCard{}, nb(1500, "req-1"), nb(1500, "req-1")},
		{"later-not-before-wins-with-its-request-id", nb(1000, "req-1"), nb(1001, "req-2"), nb(1001, "req-2")},
		{"earlier-not-before-never-shortens", nb(5000, "req-1"), nb(4999, "req-2"), nb(5000, "req-1")},
		{"equal-not-before-keeps-the-stored-request-id", nb(5000, "req-1"), nb(5000, "req-2"), nb(5000, "req-1")},
		{"zero-card-changes-nothing", both(nb(5000, "req-1"), pace(10, 20, 100)), readrecovery.ScopeCard{}, both(nb(5000, "req-1"), pace(10, 20, 100))},
		{"request-id-alone-changes-nothing", nb(5000, "req-1"), readrecovery.ScopeCard{RequestID: "req-2"}, nb(5000, "req-1")},
		{"empty-takes-pace", readrecovery.ScopeCard{}, pace(10, 20, 100), pace(10, 20, 100)},
		{"later-learnt-wins-with-rate-and-burst", pace(10, 20, 100), pace(3.5, 7, 101), pace(3.5, 7, 101)},
		{"later-learnt-wins-even-when-slower-or-zero", pace(10, 20, 100), pace(0, 0, 200), pace(0, 0, 200)},
		{"earlier-learnt-changes-nothing", pace(10, 20, 100), pace(50, 60, 99), pace(10, 20, 100)},
		{"equal-learnt-keeps-the-stored", pace(10, 20, 100), pace(50, 60, 100), pace(10, 20, 100)},
		{"rate-without-learnt-changes-nothing", pace(10, 20, 100), readrecovery.ScopeCard{Rate: 99, Burst: 99}, pace(10, 20, 100)},
		{"not-before-and-pace-merge-apart", both(nb(5000, "req-1"), pace(10, 20, 100)), both(nb(4000, "req-2"), pace(3, 4, 200)), both(nb(5000, "req-1"), pace(3, 4, 200))},
		{"both-later-win-together", both(nb(5000, "req-1"), pace(10, 20, 100)), both(nb(6000, "req-2"), pace(3, 4, 200)), both(nb(6000, "req-2"), pace(3, 4, 200))},
	}
}

// Test runs the conformance suite against stores from newStore, each
// call a new, empty store (a new directory, key prefix or blob prefix).
// The suite uses scopes of its own with random parts, so a store shared
// with earlier runs does no harm.
func Test(t *testing.T, newStore func(t *testing.T) readrecovery.ScopeStore) {
	t.Run("merge-table", func(t *testing.T) { testMergeTable(t, newStore(t)) })
	t.Run("members", func(t *testing.T) { testMembers(t, newStore(t)) })
	t.Run("member-lease-ends", func(t *testing.T) { testLeaseEnds(t, newStore(t)) })
	t.Run("scopes-apart", func(t *testing.T) { testScopesApart(t, newStore(t)) })
	t.Run("context", func(t *testing.T) { testContext(t, newStore(t)) })
	t.Run("invalid", func(t *testing.T) { testInvalid(t, newStore(t)) })
	t.Run("F3-goroutines", func(t *testing.T) {
		rounds, lost := F3(t, newStore(t), 4, 250)
		t.Logf("F3 goroutines: %d rounds of 4 writers (%d writes), %d lost", rounds, 4*rounds, lost)
		if lost != 0 {
			t.Errorf("F3: %d of %d rounds lost the maximum", lost, rounds)
		}
	})
}

// Scope returns a new scope text for a test: a URL with a query that
// looks secret, and random parts.
func Scope(t testing.TB) string {
	return "https://acct-" + randHex(t, 6) + ".blob.core.windows.net/c?sig=SECRET" + randHex(t, 6)
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Exchange calls s.Exchange with a 10 s bound and fails t on an error.
func Exchange(t testing.TB, s readrecovery.ScopeStore, scope string, c readrecovery.ScopeCard, m readrecovery.ScopeMember) readrecovery.ScopeView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.Exchange(ctx, scope, c, m)
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if v.Now.IsZero() || v.Now.Location() != time.UTC {
		t.Fatalf("view.Now = %v, want a UTC store time", v.Now)
	}
	return v
}

func testMergeTable(t *testing.T, s readrecovery.ScopeStore) {
	for _, tc := range MergeCases() {
		t.Run(tc.Name, func(t *testing.T) {
			scope := Scope(t)
			if got := Exchange(t, s, scope, tc.Stored, readrecovery.ScopeMember{}).Card; got != tc.Stored {
				t.Fatalf("stored card = %+v, want %+v", got, tc.Stored)
			}
			if got := Exchange(t, s, scope, tc.In, readrecovery.ScopeMember{}).Card; got != tc.Want {
				t.Fatalf("merged card = %+v, want %+v", got, tc.Want)
			}
			if got := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Card; got != tc.Want {
				t.Fatalf("card read back = %+v, want %+v", got, tc.Want)
			}
		})
	}
}

func member(id string, demand, share float64, lease time.Time) readrecovery.ScopeMember {
	return readrecovery.ScopeMember{ID: id, Demand: demand, Share: share, Lease: lease}
}

func equalMembers(t *testing.T, what string, got, want []readrecovery.ScopeMember) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: members = %+v, want %+v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: members = %+v, want %+v", what, got, want)
		}
	}
}

// testMembers: live members are returned sorted by ID, the caller's own
// included; a record is replaced, not duplicated; an expired one is not
// returned, even the caller's own; a zero member writes none.
func testMembers(t *testing.T, s readrecovery.ScopeStore) {
	scope := Scope(t)
	v := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	equalMembers(t, "an empty scope", v.Members, nil)
	lease := v.Now.Add(time.Hour)
	b := member("proc-b", 8, 4, lease)
	a := member("proc-a", 2, 1.5, lease.Add(time.Millisecond))
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, b)
	equalMembers(t, "b alone", v.Members, []readrecovery.ScopeMember{b})
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, a)
	equalMembers(t, "a and b", v.Members, []readrecovery.ScopeMember{a, b})

	a2 := member("proc-a", 20, 6.25, lease.Add(2*time.Millisecond))
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, a2)
	equalMembers(t, "a replaced", v.Members, []readrecovery.ScopeMember{a2, b})

	expired := member("proc-c", 1, 1, v.Now.Add(-time.Second))
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, expired)
	equalMembers(t, "c written expired", v.Members, []readrecovery.ScopeMember{a2, b})

	bGone := member("proc-b", 8, 4, v.Now.Add(-time.Millisecond))
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, bGone)
	equalMembers(t, "b's lease given up", v.Members, []readrecovery.ScopeMember{a2})

	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	equalMembers(t, "a zero member reads", v.Members, []readrecovery.ScopeMember{a2})
}

// testLeaseEnds: a member live at one exchange is not returned once the
// store's clock passes its lease (a real wait of about 1–2 s).
func testLeaseEnds(t *testing.T, s readrecovery.ScopeStore) {
	scope := Scope(t)
	v := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	keep := member("proc-keep", 1, 1, v.Now.Add(time.Hour))
	short := member("proc-short", 1, 1, v.Now.Add(time.Second))
	Exchange(t, s, scope, readrecovery.ScopeCard{}, keep)
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, short)
	if !v.Now.Before(short.Lease) {
		t.Skipf("the store's clock passed the 1 s lease within two exchanges (%v)", v.Now.Sub(short.Lease))
	}
	equalMembers(t, "before the lease ends", v.Members, []readrecovery.ScopeMember{keep, short})
	deadline := time.Now().Add(3 * time.Second)
	for !v.Now.After(short.Lease) {
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock did not pass a lease 1 s ahead within 3 s (now %v, lease %v)", v.Now, short.Lease)
		}
		time.Sleep(100 * time.Millisecond)
		v = Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	}
	equalMembers(t, "after the lease ends", v.Members, []readrecovery.ScopeMember{keep})
}

// testScopesApart: one scope's card and members are not another's.
func testScopesApart(t *testing.T, s readrecovery.ScopeStore) {
	one, two := Scope(t), Scope(t)
	v := Exchange(t, s, one, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	m := member("proc-1", 1, 1, v.Now.Add(time.Hour))
	c := readrecovery.ScopeCard{NotBefore: v.Now.Add(time.Minute), RequestID: "req-1"}
	Exchange(t, s, one, c, m)
	v = Exchange(t, s, two, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if v.Card != (readrecovery.ScopeCard{}) || len(v.Members) != 0 {
		t.Fatalf("another scope's view = %+v, want empty", v)
	}
	v = Exchange(t, s, one, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if v.Card != c {
		t.Fatalf("card = %+v, want %+v", v.Card, c)
	}
	equalMembers(t, "scope one", v.Members, []readrecovery.ScopeMember{m})
}

// testContext: a cancelled or expired context ends an exchange at once
// with its error (and ErrScopeStore), writing nothing; a nil one is
// refused.
func testContext(t *testing.T, s readrecovery.ScopeStore) {
	scope := Scope(t)
	v := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	c := readrecovery.ScopeCard{NotBefore: v.Now.Add(time.Minute), RequestID: "req-ctx"}
	m := member("proc-ctx", 1, 1, v.Now.Add(time.Hour))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline", expired, context.DeadlineExceeded},
		{"nil", nil, readrecovery.ErrScopeStore}, // refused, never a panic
	} {
		start := time.Now()
		_, err := s.Exchange(tc.ctx, scope, c, m)
		took := time.Since(start)
		if !errors.Is(err, tc.want) || !errors.Is(err, readrecovery.ErrScopeStore) {
			t.Fatalf("%s: err = %v, want %v and ErrScopeStore", tc.name, err, tc.want)
		}
		if took > time.Second {
			t.Fatalf("%s: returned after %v, want at once", tc.name, took)
		}
		if strings.Contains(err.Error(), scope) || strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("%s: the error names the scope: %v", tc.name, err)
		}
	}
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if v.Card != (readrecovery.ScopeCard{}) || len(v.Members) != 0 {
		t.Fatalf("after cancelled exchanges the view = %+v, want empty", v)
	}
}

// testInvalid: arguments no record can hold are refused with
// ErrScopeStore, and nothing is written.
func testInvalid(t *testing.T, s readrecovery.ScopeStore) {
	scope := Scope(t)
	v := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	lease := v.Now.Add(time.Hour)
	nan := 0.0
	nan = nan / nan
	for _, tc := range []struct {
		name  string
		scope string
		card  readrecovery.ScopeCard
		m     readrecovery.ScopeMember
	}{
		{"empty-scope", "", readrecovery.ScopeCard{NotBefore: lease}, readrecovery.ScopeMember{}},
		{"nan-rate", scope, readrecovery.ScopeCard{Rate: nan, Learnt: lease}, readrecovery.ScopeMember{}},
		{"negative-burst", scope, readrecovery.ScopeCard{Burst: -1, Learnt: lease}, readrecovery.ScopeMember{}},
		{"before-1970", scope, readrecovery.ScopeCard{NotBefore: time.Unix(-5, 0)}, readrecovery.ScopeMember{}},
		{"unsanitized-request-id", scope, readrecovery.ScopeCard{NotBefore: lease, RequestID: "a b"}, readrecovery.ScopeMember{}},
		{"member-id-with-slash", scope, readrecovery.ScopeCard{NotBefore: lease}, member("../x", 1, 1, lease)},
		{"member-without-id", scope, readrecovery.ScopeCard{NotBefore: lease}, member("", 1, 1, lease)},
		{"member-id-too-long", scope, readrecovery.ScopeCard{NotBefore: lease}, member(strings.Repeat("x", 65), 1, 1, lease)},
		{"negative-demand", scope, readrecovery.ScopeCard{NotBefore: lease}, member("proc-1", -1, 1, lease)},
	} {
		_, err := s.Exchange(context.Background(), tc.scope, tc.card, tc.m)
		if !errors.Is(err, readrecovery.ErrScopeStore) {
			t.Fatalf("%s: err = %v, want ErrScopeStore", tc.name, err)
		}
	}
	v = Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if v.Card != (readrecovery.ScopeCard{}) || len(v.Members) != 0 {
		t.Fatalf("after refused exchanges the view = %+v, want empty", v)
	}
}

// F3 runs rounds rounds of writers goroutines that each exchange a
// different not-before for one scope of s at the same moment; after each
// round it reads the card and counts the round lost unless the card holds
// the maximum written so far with its request ID. Each writer's own
// answer must hold at least what it wrote. It returns the rounds and the
// rounds lost.
func F3(t *testing.T, s readrecovery.ScopeStore, writers, rounds int) (int, int) {
	scope := Scope(t)
	base := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Now.Add(time.Hour)
	var maxNB time.Time
	var maxID string
	lost := 0
	errs := make(chan error, writers)
	for r := range rounds {
		// Distinct values: writer i's are i modulo writers, in a range
		// that grows with r, so that a round's maximum is often, not
		// always, a new one.
		vals := make([]time.Time, writers)
		for i := range vals {
			vals[i] = base.Add(time.Duration(mrand.IntN(20*(r+1))*writers+i) * time.Millisecond)
		}
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range writers {
			done.Go(func() {
				start.Wait()
				c := readrecovery.ScopeCard{NotBefore: vals[i], RequestID: fmt.Sprintf("w%d-r%d", i, r)}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				v, err := s.Exchange(ctx, scope, c, readrecovery.ScopeMember{})
				if err == nil && v.Card.NotBefore.Before(vals[i]) {
					err = fmt.Errorf("writer %d round %d: answer %v before its own %v", i, r, v.Card.NotBefore, vals[i])
				}
				if err != nil {
					errs <- err
				}
			})
		}
		start.Done()
		done.Wait()
		select {
		case err := <-errs:
			t.Fatalf("F3: %v", err)
		default:
		}
		for i, v := range vals {
			if v.After(maxNB) {
				maxNB, maxID = v, fmt.Sprintf("w%d-r%d", i, r)
			}
		}
		got := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Card
		if !got.NotBefore.Equal(maxNB) || got.RequestID != maxID {
			lost++
			t.Errorf("F3 round %d: card %v %s, want the maximum %v %s", r, got.NotBefore, got.RequestID, maxNB, maxID)
		}
	}
	return rounds, lost
}

// NoScopeText checks that a store filed nothing under a name, and wrote
// nothing, that carries a scope's text: it exchanges a card and a member
// for a scope whose text has a marker, then calls dump for every name
// (file path, key, blob name) and every record's content the store
// holds, and fails when one holds the scope or any part of it.
func NoScopeText(t *testing.T, s readrecovery.ScopeStore, dump func(t *testing.T) []string) {
	t.Helper()
	host := "acct" + randHex(t, 6)
	secret := "SIG" + randHex(t, 8)
	scope := "https://" + host + ".blob.core.windows.net/c?sig=" + secret
	v := Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	Exchange(t, s, scope,
		readrecovery.ScopeCard{NotBefore: v.Now.Add(time.Minute), RequestID: "req-1", Rate: 5, Burst: 10, Learnt: v.Now},
		member("proc-1", 1, 1, v.Now.Add(time.Hour)))
	all := dump(t)
	if len(all) == 0 {
		t.Fatal("dump returned nothing: the store wrote no name")
	}
	for _, s := range all {
		for _, part := range []string{scope, host, secret, "blob.core.windows.net"} {
			if strings.Contains(s, part) {
				t.Fatalf("the store holds %q, which carries the scope's text %q", s, part)
			}
		}
	}
}
