// Package redact makes request identifiers, ETags and URLs safe to keep:
// nothing secret (credentials, query strings, userinfo, bodies) may leave
// the module (docs/policy.md, "sanitized-request-ids" and
// "nothing-secret-leaves").
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

// MaxIDLen is the longest request ID kept as it is.
const MaxIDLen = 128

// requestIDHeaders are looked up in this order; the first present wins.
var requestIDHeaders = [...]string{"X-Ms-Request-Id", "Request-Id", "X-Request-Id", "Apim-Request-Id"}

// RequestID returns the sanitized request ID of a response header, or "".
func RequestID(h http.Header) string { return ID(RequestIDValue(h)) }

// RequestIDValue returns the request ID of a response header as the server
// sent it, or "": for a caller that keeps it and sanitizes it with [ID]
// before it leaves the library.
func RequestIDValue(h http.Header) string {
	for _, k := range requestIDHeaders {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// ID sanitizes a request ID: a value of at most MaxIDLen characters from
// [A-Za-z0-9._:-] is kept as it is; anything else becomes a short digest
// marker "sha256:" + 16 hex digits, so that the original cannot leak but two
// equal IDs stay equal.
func ID(s string) string {
	if s == "" {
		return ""
	}
	if len(s) <= MaxIDLen && idSafe(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// ETag sanitizes an entity tag. It is the module's one ETag rule: the
// transport's report, the journal's receipts and the Blob checkpoint proof
// all keep what it returns.
//
// An ETag of at most MaxIDLen bytes whose opaque part holds only
// [A-Za-z0-9._:-] is kept exactly as it is, in any of the forms of RFC 9110
// section 8.8.3: bare (0x8DCAFE), quoted ("0x8DCAFE", as Azure Storage and
// AI Search send it), or weak (W/"1"). Anything else (a space, a slash, an
// unbalanced quote, markup, non-ASCII, a longer value) becomes the digest
// marker of [ID], so that it cannot leak but two equal ETags stay equal:
// the proof that compares a stored ETag with a fresh one holds either way.
func ETag(s string) string {
	if s == "" {
		return ""
	}
	if len(s) <= MaxIDLen && etagSafe(s) {
		return s
	}
	return ID(s)
}

// etagSafe reports whether s is [W/]opaque or [W/]"opaque" with opaque of
// safe characters (possibly empty when quoted).
func etagSafe(s string) bool {
	s = strings.TrimPrefix(s, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return idSafe(s[1 : len(s)-1])
	}
	return s != "" && idSafe(s)
}

func idSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if !idByte[s[i]] {
			return false
		}
	}
	return true
}

// idByte marks the bytes an identifier may hold as it is: ASCII letters and
// digits, '.', '_', ':' and '-'. A table, not a switch: one load per byte.
var idByte = func() (t [256]bool) {
	for c := range 256 {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			t[c] = true
		case c == '.', c == '_', c == ':', c == '-':
			t[c] = true
		}
	}
	return t
}()

// URL returns u as scheme://host/path: no userinfo, no query, no fragment.
// A nil u gives "".
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	var b strings.Builder
	b.Grow(len(u.Scheme) + 3 + len(u.Host) + len(u.EscapedPath()))
	if u.Scheme != "" {
		b.WriteString(u.Scheme)
		b.WriteString("://")
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	return b.String()
}

// URLDigest returns "sha256:" and the hex SHA-256 of URL(u).
func URLDigest(u *url.URL) string {
	sum := sha256.Sum256([]byte(URL(u)))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Text makes a free-form diagnostic (an error message) safe: any URL query
// or userinfo it contains is removed, and it is cut to 256 bytes.
func Text(s string) string {
	// Drop the query of anything that looks like a URL: everything from a
	// '?' up to the next white space or quote.
	var b strings.Builder
	skip := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if skip {
			if c == ' ' || c == '"' || c == '\'' || c == '\n' || c == '\t' {
				skip = false
			} else {
				continue
			}
		}
		if c == '?' {
			skip = true
			continue
		}
		b.WriteByte(c)
	}
	out := stripUserinfo(b.String())
	if len(out) > 256 {
		out = out[:256]
	}
	return out
}

// stripUserinfo removes "user:pass@" after every "://" in s.
func stripUserinfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		rest := s[i+3:]
		end := strings.IndexAny(rest, " /\"'\n\t")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			rest = rest[at+1:]
		}
		s = rest
	}
}
