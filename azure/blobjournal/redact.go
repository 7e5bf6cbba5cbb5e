package blobjournal

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// This module may use only the public API of the readrecovery module, so
// it keeps its own copy of the two rules it needs of the root's (internal)
// redaction: a request ID is kept only when it is plainly safe, and a
// diagnostic loses any URL query and userinfo. They must agree with the
// root's: nothing secret leaves (docs/policy.md: nothing-secret-leaves).

// maxIDLen is the longest request ID kept as it is.
const maxIDLen = 128

// requestID returns the sanitized x-ms-request-id of a response header
// (or request-id, x-request-id, apim-request-id, the first present), or "".
func requestID(h http.Header) string {
	for _, k := range [...]string{"X-Ms-Request-Id", "Request-Id", "X-Request-Id", "Apim-Request-Id"} {
		if v := h[k]; len(v) > 0 {
			return safeID(v[0])
		}
	}
	return ""
}

// safeID keeps an ID of at most maxIDLen bytes of [A-Za-z0-9._:-] as it
// is; anything else becomes "sha256:" and 16 hex digits of its digest.
func safeID(s string) string {
	if s == "" {
		return ""
	}
	ok := len(s) <= maxIDLen
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// safeText removes from a diagnostic every URL query (from a '?' to the
// next white space or quote) and every userinfo ("user:pass@" after
// "://"), and cuts it to 256 bytes.
func safeText(s string) string {
	var b strings.Builder
	skip := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if skip {
			if c != ' ' && c != '"' && c != '\'' && c != '\n' && c != '\t' {
				continue
			}
			skip = false
		}
		if c == '?' {
			skip = true
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	var o strings.Builder
	for {
		i := strings.Index(out, "://")
		if i < 0 {
			o.WriteString(out)
			break
		}
		o.WriteString(out[:i+3])
		rest := out[i+3:]
		end := strings.IndexAny(rest, " /\"'\n\t")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			rest = rest[at+1:]
		}
		out = rest
	}
	if s := o.String(); len(s) > 256 {
		return s[:256]
	}
	return o.String()
}
