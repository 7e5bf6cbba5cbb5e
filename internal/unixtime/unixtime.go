// Package unixtime holds the one bound on representable times that the
// Retry-After parser, the journal and the command share (docs/policy.md:
// typed-retry-after). A time later than [Max] has no timing: a delay whose
// not-before would lie beyond it is unrepresentable (overlong, unresolved
// across invocations), never a persistence failure.
package unixtime

// Max is the last representable second, 9999-12-31T23:59:59Z, in Unix
// seconds: the largest time that time.Unix converts and formats as an
// RFC 3339 UTC time without overflow or a five-digit year.
const Max int64 = 253402300799

// Representable reports whether the Unix second s lies within 0 and [Max].
func Representable(s int64) bool { return s >= 0 && s <= Max }
