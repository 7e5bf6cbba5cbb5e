package readrecovery

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzAzureScope checks, for any URL, that [AzureScope]'s scope holds no
// query or user information ('?', '@') and that it does not change when
// the host is spelt otherwise: upper case, a trailing dot, the scheme's
// default port, all three, or the canonical spelling. Its seed corpus
// (every table URL) runs in every go test.
func FuzzAzureScope(f *testing.F) {
	for _, tc := range azureScopeCases() {
		f.Add(tc.url)
	}
	for _, tc := range azureScopeSpellingCases() {
		for _, u := range tc.urls {
			f.Add(u)
		}
	}
	// Path segments that are no Azure name (they would carry '@' or a
	// decoded '?' into the scope).
	f.Add("https://management.azure.com/subscriptions/a@b/resourceGroups")
	f.Add("https://management.azure.com/subscriptions/a%3Fb=SECRET/resourceGroups")
	f.Add("https://res.openai.azure.com/openai/deployments/d@x/chat/completions")
	f.Add("http://127.0.0.1:10000/user@host/c")
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		want := AzureScope(&http.Request{Method: http.MethodGet, URL: u})
		if strings.ContainsAny(want, "?@") {
			t.Fatalf("AzureScope(%q) = %q holds a query or user information", raw, want)
		}
		for _, host := range hostSpellings(u) {
			v := *u
			v.Host = host
			if got := AzureScope(&http.Request{Method: http.MethodGet, URL: &v}); got != want {
				t.Errorf("AzureScope(%q) = %q, with the host spelt %q: %q", raw, want, host, got)
			}
		}
	})
}

// hostSpellings are other spellings of u's host that name the same unit:
// upper case, a trailing dot (a name that has none), the scheme's default
// port (a host that has no port), all three, and the canonical spelling.
func hostSpellings(u *url.URL) []string {
	name, port := u.Hostname(), u.Port()
	scheme := strings.ToLower(u.Scheme)
	def := map[string]string{"https": "443", "http": "80"}[scheme]
	if port == def {
		port = ""
	}
	upper := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if 'a' <= c && c <= 'z' {
				b[i] = c - ('a' - 'A')
			}
		}
		return string(b)
	}
	dotted := name
	if !strings.HasSuffix(name, ".") && !strings.Contains(name, ":") {
		dotted += "."
	}
	withDefault := port
	if port == "" && def != "" {
		withDefault = def
	}
	canonical := name
	if n, ok := strings.CutSuffix(name, "."); ok && !strings.HasSuffix(n, ".") {
		canonical = n
	}
	canonical = lowerASCII(canonical)
	return []string{
		upper(u.Host),
		joinHostPort(dotted, port),
		joinHostPort(name, withDefault),
		upper(joinHostPort(dotted, withDefault)),
		joinHostPort(canonical, port),
	}
}
