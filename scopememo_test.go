package readrecovery

import (
	"net/http"
	"sync"
	"testing"
)

// The memo answers what schemeHost answers, request after request,
// whether the scheme and host stay, change or come back spelt otherwise;
// the same scheme and host again allocate nothing.
func TestHostMemo(t *testing.T) {
	var m hostMemo
	for i, u := range []string{
		"https://acct.blob.core.windows.net/c/a",
		"https://acct.blob.core.windows.net/c/b",
		"http://acct.blob.core.windows.net/c/a",
		"https://ACCT.blob.core.windows.net/c/a",
		"https://acct.blob.core.windows.net:443/c/a",
		"https://acct.blob.core.windows.net./c/a",
		"http://127.0.0.1:8080/seq/1/2",
		"http://127.0.0.1:8081/seq/1/2",
		"http://[::1]:8080/x",
		"https://acct.blob.core.windows.net/c/a",
	} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.scopeOf(req), schemeHost(req); got != want {
			t.Fatalf("%d: scopeOf(%s) = %q, want %q", i, u, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/seq/1/2", nil)
	m.scopeOf(req)
	if n := testing.AllocsPerRun(100, func() { m.scopeOf(req) }); n != 0 {
		t.Fatalf("the same host again: %v allocations, want 0", n)
	}
}

// Only the default scope is remembered (and is: the same host again
// allocates nothing); a scope function given is asked about every request.
func TestScopeOfAsksTheScopeFunction(t *testing.T) {
	calls := 0
	tab := newRestrictions(func(*http.Request) string { calls++; return "s" })
	req, _ := http.NewRequest(http.MethodGet, "https://a.example/x", nil)
	for range 3 {
		tab.scopeOf(req)
	}
	if calls != 3 {
		t.Fatalf("the scope function was asked %d times for 3 requests", calls)
	}
	def := newRestrictions(nil)
	if got := def.scopeOf(req); got != "https://a.example" {
		t.Fatalf("the default scope = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { def.scopeOf(req) }); n != 0 {
		t.Fatalf("the default scope of the same host again: %v allocations, want 0", n)
	}
}

// Requests to two hosts at once each get their own host's scope (run
// with -race: the memo is shared by every request of the table).
func TestHostMemoConcurrent(t *testing.T) {
	var m hostMemo
	var wg sync.WaitGroup
	for _, u := range []string{"https://a.example/x", "https://b.example/y"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		want := schemeHost(req)
		wg.Go(func() {
			for range 1000 {
				if got := m.scopeOf(req); got != want {
					t.Errorf("scopeOf(%s) = %q, want %q", u, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
