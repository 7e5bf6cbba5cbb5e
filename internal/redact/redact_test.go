package redact

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// R26: request IDs: the first present header wins; safe IDs are kept as
// they are; anything else becomes a digest marker.
func TestRequestIDAndID(t *testing.T) {
	h := http.Header{}
	h.Set("Apim-Request-Id", "d")
	h.Set("X-Request-Id", "c")
	if got := RequestID(h); got != "c" {
		t.Fatalf("RequestID = %q, want c", got)
	}
	h.Set("Request-Id", "b")
	h.Set("X-Ms-Request-Id", "a")
	if got := RequestID(h); got != "a" {
		t.Fatalf("RequestID = %q, want a", got)
	}
	for in, want := range map[string]string{
		"":                       "",
		"0f8c-1A._:z":            "0f8c-1A._:z",
		strings.Repeat("a", 128): strings.Repeat("a", 128),
	} {
		if got := ID(in); got != want {
			t.Errorf("ID(%q) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{strings.Repeat("a", 129), "a b", "tok=secret&x", "é"} {
		got := ID(in)
		if !strings.HasPrefix(got, "sha256:") || len(got) != 7+16 || strings.Contains(got, in) {
			t.Errorf("ID(%q) = %q, want a 16-hex digest marker", in, got)
		}
		if ID(in) != got {
			t.Errorf("ID(%q) is not stable", in)
		}
	}
}

func TestETag(t *testing.T) {
	for in, want := range map[string]string{
		`"0x8DCAFE"`:  `"0x8DCAFE"`,
		`W/"1"`:       `W/"1"`,
		`0x8D`:        `0x8D`,
		`""`:          `""`,
		`"a b"`:       "sha256:",
		`"a"<script>`: "sha256:",
	} {
		got := ETag(in)
		if want == "sha256:" {
			if !strings.HasPrefix(got, want) {
				t.Errorf("ETag(%q) = %q, want a digest marker", in, got)
			}
		} else if got != want {
			t.Errorf("ETag(%q) = %q, want %q", in, got, want)
		}
	}
}

// R27: URLs lose their userinfo, query and fragment.
func TestURL(t *testing.T) {
	u, _ := url.Parse("https://user:pw@acct.blob.core.windows.net:443/c/b%20x?sv=1&sig=SECRET#frag")
	if got, want := URL(u), "https://acct.blob.core.windows.net:443/c/b%20x"; got != want {
		t.Fatalf("URL = %q, want %q", got, want)
	}
	if URL(nil) != "" {
		t.Fatal("URL(nil) must be empty")
	}
	d := URLDigest(u)
	if !strings.HasPrefix(d, "sha256:") || len(d) != 7+64 {
		t.Fatalf("URLDigest = %q", d)
	}
	u2, _ := url.Parse("https://acct.blob.core.windows.net:443/c/b%20x?sig=OTHER")
	if URLDigest(u2) != d {
		t.Fatal("the digest must not depend on the query")
	}
}

// R27: free-form diagnostics lose URL queries and userinfo.
func TestText(t *testing.T) {
	in := `Get "https://user:pw@acct.blob.core.windows.net/c/b?sv=1&sig=SECRET": read tcp: connection reset`
	got := Text(in)
	for _, bad := range []string{"SECRET", "sig=", "pw@", "user:"} {
		if strings.Contains(got, bad) {
			t.Fatalf("Text kept %q: %q", bad, got)
		}
	}
	if want := `Get "https://acct.blob.core.windows.net/c/b": read tcp: connection reset`; got != want {
		t.Fatalf("Text = %q, want %q", got, want)
	}
	two := Text(`a https://u:p@h1/x b http://v@h2/y`)
	if two != `a https://h1/x b http://h2/y` {
		t.Fatalf("Text = %q", two)
	}
	if got := Text(strings.Repeat("x", 300)); len(got) != 256 {
		t.Fatalf("Text must cut to 256 bytes, got %d", len(got))
	}
}
