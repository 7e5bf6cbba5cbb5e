// Package redact makes request identifiers and URLs safe to keep: nothing
// secret (credentials, query strings, userinfo, bodies) may leave the module
// (SPEC R26, R27).
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
func RequestID(h http.Header) string {
	for _, k := range requestIDHeaders {
		if v := h[k]; len(v) > 0 {
			return ID(v[0])
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

// ETag sanitizes an entity tag as ID does, also allowing the quotes and the
// "W/" prefix of RFC 9110 entity tags ("0x8DCAFE", W/"1").
func ETag(s string) string {
	if s == "" {
		return ""
	}
	inner := strings.TrimPrefix(s, "W/")
	inner = strings.TrimSuffix(strings.TrimPrefix(inner, `"`), `"`)
	if len(s) <= MaxIDLen && (inner == "" || idSafe(inner)) {
		return s
	}
	return ID(s)
}

func idSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

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
