package readrecovery

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The quota headers (docs/policy.md: quota-headers), canonical.
const (
	quotaPrefixOpenAI = "X-Ratelimit-Remaining-"    // -Requests, -Tokens (Azure OpenAI)
	quotaPrefixARM    = "X-Ms-Ratelimit-Remaining-" // -Subscription-Reads, ... (Resource Manager)
)

// remainingQuota returns the least quota a response's headers say
// remains, -1 when none says it: a missing, negative or malformed value
// (not a decimal integer) is unknown.
func remainingQuota(h http.Header) int {
	least := -1
	for k, vs := range h {
		if len(k) < len(quotaPrefixOpenAI) || k[0] != 'X' || len(vs) == 0 {
			continue
		}
		if !strings.HasPrefix(k, quotaPrefixOpenAI) && !strings.HasPrefix(k, quotaPrefixARM) {
			continue
		}
		if n, ok := quotaValue(vs[0]); ok && (least < 0 || n < least) {
			least = n
		}
	}
	return least
}

// The reset headers of the quota (Azure OpenAI, OpenAI), canonical: the
// time until the requests' or the tokens' quota is renewed.
var quotaResets = [...]string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"}

// quotaFresh is how long a remaining-quota count binds after the answer
// that said it when the scope's later answers say nothing newer
// (docs/policy.md: quota-headers, "News expires"): Azure OpenAI's
// request and token quotas are counted per minute (a count without its
// reset header is a minute's news at most), and Resource Manager's
// buckets refill continuously, well within a minute. After it the quota is
// unknown again and binds nothing; a count at 0 with a reset header binds
// until that reset instead.
const quotaFresh = time.Minute

// maxQuotaPeak bounds the quota a reset renews.
const maxQuotaPeak = 1 << 20

// maxQuotaReset bounds a reset header's value: a longer one is unknown.
const maxQuotaReset = time.Hour

// quotaReset returns the longest valid reset a response's headers give,
// -1 when none does. A value is a duration as OpenAI writes it ("1s",
// "6m0s", "12ms", "1.5s") or a decimal number of seconds ("1", "0.5"),
// above 0 and at most maxQuotaReset; anything else is unknown.
func quotaReset(h http.Header) time.Duration {
	longest := time.Duration(-1)
	for _, k := range quotaResets {
		vs := h[k]
		if len(vs) == 0 {
			continue
		}
		if d, ok := resetValue(vs[0]); ok && d > longest {
			longest = d
		}
	}
	return longest
}

// resetValue parses one reset value (see quotaReset).
func resetValue(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 32 {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(f) || f > maxQuotaReset.Seconds() {
			return 0, false
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 || d > maxQuotaReset {
		return 0, false
	}
	return d, true
}

// quotaValue parses a non-negative decimal integer (at most 9 digits).
func quotaValue(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n, true
}
