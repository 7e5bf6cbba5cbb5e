package redact

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Request IDs: the first present header wins; safe IDs are kept as they
// are; anything else becomes a digest marker.
func TestRequestIDFirstHeaderWinsAndUnsafeIDsBecomeDigests(t *testing.T) {
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

// The one ETag rule: safe ETags, in each RFC 9110 form, are kept exactly
// (the Blob checkpoint proof compares them); anything else becomes the same
// digest marker ID gives, stable, with nothing of the original in it.
func TestETagKeepsSafeFormsAndDigestsTheRest(t *testing.T) {
	const digest = "digest"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"azure storage quoted", `"0x8DCAFE0123456"`, `"0x8DCAFE0123456"`},
		{"fakeserver style", `"0x8D000000000002A"`, `"0x8D000000000002A"`},
		{"weak", `W/"1"`, `W/"1"`},
		{"bare", `0x8D`, `0x8D`},
		{"empty quoted", `""`, `""`},
		{"safe punctuation", `"a.b_c:d-e"`, `"a.b_c:d-e"`},
		{"128 bytes", `"` + strings.Repeat("a", 126) + `"`, `"` + strings.Repeat("a", 126) + `"`},
		{"129 bytes", `"` + strings.Repeat("a", 127) + `"`, digest},
		{"space", `"a b"`, digest},
		{"slash", `"a/b=="`, digest},
		{"markup after the quote", `"a"<script>`, digest},
		{"unbalanced quote", `"abc`, digest},
		{"lone quote", `"`, digest},
		{"weak prefix alone", `W/`, digest},
		{"query-like", `"x?sig=SECRET"`, digest},
		{"non-ASCII", `"é"`, digest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ETag(tc.in)
			if tc.want != digest {
				if got != tc.want {
					t.Fatalf("ETag(%q) = %q, want %q", tc.in, got, tc.want)
				}
				return
			}
			if got != ID(tc.in) || !strings.HasPrefix(got, "sha256:") || len(got) != 7+16 {
				t.Fatalf("ETag(%q) = %q, want the digest marker %q", tc.in, got, ID(tc.in))
			}
		})
	}
}

// URLs lose their userinfo, query and fragment.
func TestURLDropsUserinfoQueryAndFragment(t *testing.T) {
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

// Free-form diagnostics lose URL queries and userinfo.
func TestTextDropsQueriesAndUserinfo(t *testing.T) {
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

// Every one of the 256 byte values: an identifier keeps exactly the ASCII
// letters and digits and . _ : - (the one byte in the middle of a safe ID).
func TestIDKeepsExactlyTheSafeBytes(t *testing.T) {
	const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"
	kept := 0
	for c := range 256 {
		in := "a" + string([]byte{byte(c)}) + "b"
		want := strings.IndexByte(safe, byte(c)) >= 0
		if got := ID(in) == in; got != want {
			t.Errorf("byte %#x: kept %v, want %v", c, got, want)
		}
		if want {
			kept++
		}
	}
	if kept != len(safe) {
		t.Fatalf("%d safe bytes, want %d", kept, len(safe))
	}
}
