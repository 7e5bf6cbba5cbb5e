package rrredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/scopestoretest"
)

func randomPrefix(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "rrtest:" + hex.EncodeToString(b) + ":"
}

// The conformance suite against a real redis-server, each store under a
// prefix of its own.
func TestScopeStore(t *testing.T) {
	c := client(t)
	scopestoretest.Test(t, func(t *testing.T) readrecovery.ScopeStore {
		return NewScopeStore(c, randomPrefix(t))
	})
}

// redisDump returns every key under prefix and every value in it.
func redisDump(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(keys)
	for _, k := range keys {
		switch typ := c.Type(ctx, k).Val(); typ {
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				out = append(out, f, v)
			}
		case "zset":
			out = append(out, c.ZRange(ctx, k, 0, -1).Val()...)
		default:
			t.Fatalf("key %s of type %s", k, typ)
		}
	}
	return out
}

func TestScopeStoreNoScopeText(t *testing.T) {
	c := client(t)
	prefix := randomPrefix(t)
	scopestoretest.NoScopeText(t, NewScopeStore(c, prefix), func(t *testing.T) []string { return redisDump(t, c, prefix) })
}

// The keys and values an exchange leaves: exactly the scope's three keys
// (the digest of "https://acct.blob.core.windows.net" in a hash tag), the
// card's six fields, the member's lease and record.
func TestScopeStoreKeys(t *testing.T) {
	c := client(t)
	prefix := randomPrefix(t)
	s := NewScopeStore(c, prefix)
	t0 := scopestoretest.T0
	card := readrecovery.ScopeCard{NotBefore: t0.Add(1500 * time.Millisecond), RequestID: "req-1", Rate: 2.5, Burst: 10, Learnt: t0}
	lease := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	m := readrecovery.ScopeMember{ID: "proc-1", Demand: 4, Share: 2, Lease: lease}
	v := scopestoretest.Exchange(t, s, "https://acct.blob.core.windows.net", card, m)
	if v.Card != card || len(v.Members) != 1 || v.Members[0] != m {
		t.Fatalf("view = %+v, want card %+v and member %+v", v, card, m)
	}
	ctx := context.Background()
	base := prefix + "{351982ae40f6f5dfd1a1f61fe442ade8}:"
	keys, _ := c.Keys(ctx, prefix+"*").Result()
	slices.Sort(keys)
	if want := []string{base + "card", base + "leases", base + "members"}; !slices.Equal(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
	got := c.HGetAll(ctx, base+"card").Val()
	want := map[string]string{"v": "1", "nb": "1796436001500", "rid": "req-1", "rate": "2.5", "burst": "10", "learnt": "1796436000000"}
	if len(got) != len(want) {
		t.Fatalf("card = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("card = %v, want %v", got, want)
		}
	}
	if score := c.ZScore(ctx, base+"leases", "proc-1").Val(); int64(score) != lease.UnixMilli() {
		t.Fatalf("lease score = %v, want %d", score, lease.UnixMilli())
	}
	if rec := c.HGet(ctx, base+"members", "proc-1").Val(); rec != `{"v":1,"demand":4,"share":2}` {
		t.Fatalf("record = %q", rec)
	}
}

// A card that fails its checks fails every exchange with a typed error
// naming its key, and is left as it is.
func TestScopeStoreCorruptCard(t *testing.T) {
	c := client(t)
	prefix := randomPrefix(t)
	s := NewScopeStore(c, prefix)
	scope := scopestoretest.Scope(t)
	key := prefix + "{" + digest(scope) + "}:card"
	ctx := context.Background()
	good := map[string]any{"v": "1", "nb": "1000", "rid": "req-1", "rate": "1", "burst": "2", "learnt": "1000"}
	for _, tc := range []struct {
		name  string
		field string
		value string
	}{
		{"version", "v", "2"},
		{"not-before", "nb", "12x"},
		{"not-before-negative", "nb", "-5"},
		{"learnt-too-long", "learnt", "1234567890123456"},
		{"rate-nan", "rate", "nan"},
		{"rate-negative", "rate", "-1"},
		{"burst-inf", "burst", "inf"},
		{"request-id", "rid", "a b"},
		{"unknown-field", "extra", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Del(ctx, key)
			if err := c.HSet(ctx, key, good).Err(); err != nil {
				t.Fatal(err)
			}
			c.HSet(ctx, key, tc.field, tc.value)
			before := c.HGetAll(ctx, key).Val()
			for _, card := range []readrecovery.ScopeCard{{}, {NotBefore: time.Now().Add(time.Hour), RequestID: "req-2", Rate: 5, Learnt: time.Now()}} {
				_, err := s.Exchange(ctx, scope, card, readrecovery.ScopeMember{})
				var ce *corruptError
				if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.As(err, &ce) || ce.Key != key {
					t.Fatalf("err = %v, want ErrScopeStore and a corrupt card at %s", err, key)
				}
				if strings.Contains(err.Error(), "SECRET") {
					t.Fatalf("the error names the scope: %v", err)
				}
				after := c.HGetAll(ctx, key).Val()
				if len(after) != len(before) || after[tc.field] != before[tc.field] || after["nb"] != before["nb"] {
					t.Fatalf("card changed: %v, was %v", after, before)
				}
			}
		})
	}
}

// Redis that does not answer (stopped with SIGSTOP): an exchange returns
// when its context is done, with ErrScopeStore and the context's error;
// Redis that is gone (nothing listening): at once, with ErrScopeStore.
func TestScopeStoreRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a redis-server of its own")
	}
	bin := startRedis(t).cmd.Path // the binary the shared server runs
	srv, err := launch(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	c := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1})
	defer c.Close()
	s := NewScopeStore(c, randomPrefix(t))
	scope := scopestoretest.Scope(t)
	card := readrecovery.ScopeCard{NotBefore: time.Now().Add(time.Hour), RequestID: "req-1"}
	scopestoretest.Exchange(t, s, scope, card, readrecovery.ScopeMember{})

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err = s.Exchange(ctx, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	took := time.Since(start)
	cancel()
	srv.cmd.Process.Signal(syscall.SIGCONT)
	if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung Redis: err = %v, want ErrScopeStore and DeadlineExceeded", err)
	}
	if took > time.Second {
		t.Fatalf("hung Redis: returned after %v, want just after 200 ms", took)
	}
	t.Logf("hung Redis: %v after %v", err, took)

	srv.stop()
	start = time.Now()
	_, err = s.Exchange(context.Background(), scope, card, readrecovery.ScopeMember{})
	took = time.Since(start)
	if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Redis gone: err = %v, want ErrScopeStore and ECONNREFUSED", err)
	}
	if took > time.Second || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Redis gone: %v after %v", err, took)
	}
	t.Logf("Redis gone: %v after %v", err, took)
}

// BenchmarkExchange measures one exchange of the Redis store against a
// local redis-server (docs/fleets.md, "Stores"; the two exchanges:
// scopestoretest.Bench).
func BenchmarkExchange(b *testing.B) {
	scopestoretest.Bench(b, NewScopeStore(client(b), randomPrefix(b)))
}
