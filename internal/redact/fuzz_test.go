package redact

import (
	"strings"
	"testing"
)

// FuzzETag: whatever the server sends, ETag returns either the value
// itself (at most MaxIDLen bytes, safe characters in a bare, quoted or
// weak form) or ID's digest marker, with nothing of the value in it; equal
// inputs give equal outputs.
func FuzzETag(f *testing.F) {
	for _, s := range []string{"", `"0x8DCAFE0123456"`, `W/"1"`, `0x8D`, `""`, `"a b"`, `"a/b=="`,
		`"a"<script>`, `"abc`, `"`, `W/`, `"x?sig=SECRET"`, `"é"`, `"` + strings.Repeat("a", 127) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := ETag(in)
		if got != ETag(in) {
			t.Fatalf("ETag(%q) is not stable", in)
		}
		switch {
		case in == "":
			if got != "" {
				t.Fatalf("ETag(\"\") = %q", got)
			}
		case got == in:
			if len(in) > MaxIDLen || !etagSafe(in) {
				t.Fatalf("ETag kept %q, which is not a safe ETag", in)
			}
			for i := 0; i < len(in); i++ {
				if c := in[i]; c < 0x21 || c > 0x7e {
					t.Fatalf("ETag kept %q with byte %#x", in, c)
				}
			}
		default:
			if got != ID(in) || !strings.HasPrefix(got, "sha256:") || len(got) != 7+16 {
				t.Fatalf("ETag(%q) = %q, want the digest marker %q", in, got, ID(in))
			}
			if etagSafe(in) && len(in) <= MaxIDLen {
				t.Fatalf("ETag digested the safe ETag %q", in)
			}
		}
	})
}
