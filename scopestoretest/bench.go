package scopestoretest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// Bench runs two exchanges against s as sub-benchmarks (each store's
// BenchmarkExchange, docs/fleets.md "Stores"): "renew" is a process's
// timer exchange (a card that changes nothing, its member record
// rewritten, four live members read back); "merge" a 429's exchange (a
// later not-before merged and written, then the same member work).
func Bench(b *testing.B, s readrecovery.ScopeStore) {
	ctx := context.Background()
	scope := fmt.Sprintf("https://bench-%d.blob.core.windows.net", time.Now().UnixNano())
	v, err := s.Exchange(ctx, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if err != nil {
		b.Fatal(err)
	}
	lease := v.Now.Add(time.Hour)
	for i := range 3 {
		if _, err := s.Exchange(ctx, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{ID: fmt.Sprintf("other-%d", i), Demand: 1, Share: 1, Lease: lease}); err != nil {
			b.Fatal(err)
		}
	}
	me := readrecovery.ScopeMember{ID: "me", Demand: 2, Share: 1, Lease: lease}
	nb := v.Now.Add(time.Minute)
	b.Run("renew", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, err := s.Exchange(ctx, scope, readrecovery.ScopeCard{}, me)
			if err != nil || len(v.Members) != 4 {
				b.Fatalf("%d members, %v", len(v.Members), err)
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			nb = nb.Add(time.Millisecond)
			v, err := s.Exchange(ctx, scope, readrecovery.ScopeCard{NotBefore: nb, RequestID: "req-1"}, me)
			if err != nil || !v.Card.NotBefore.Equal(nb) {
				b.Fatalf("card %v, %v", v.Card.NotBefore, err)
			}
		}
	})
}
