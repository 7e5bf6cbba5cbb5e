package fakeserver

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// QuotaForm is which remaining-quota headers a [TokenBucket] rule's
// responses carry: the tokens left in the request's bucket after it (0 on
// the 429 it fires), as the services that report their remaining quota do.
type QuotaForm string

// The forms of [QuotaHeaders].
const (
	// QuotaOpenAI sends Azure OpenAI's x-ratelimit-remaining-requests and
	// x-ratelimit-reset-requests, the time until the bucket is full again
	// in OpenAI's form (docs/fakeserver.md#quota-headers).
	QuotaOpenAI QuotaForm = "openai"
	// QuotaARM sends Resource Manager's
	// x-ms-ratelimit-remaining-subscription-reads (GET, HEAD) or
	// -writes (the other methods).
	QuotaARM QuotaForm = "arm"
)

// QuotaHeaders makes the rule's [TokenBucket] tell every request it is
// asked about how many tokens its bucket has left, in the headers of form
// (and, for [QuotaOpenAI], when the bucket is full again).
// It panics on a form other than [QuotaOpenAI] and [QuotaARM].
func QuotaHeaders(form QuotaForm) RuleOption {
	if form != QuotaOpenAI && form != QuotaARM {
		panic("fakeserver: QuotaHeaders: unknown form " + strconv.Quote(string(form)))
	}
	return func(r *Rule) { r.Bucket.Quota = form }
}

// PerSubscription keeps the rule's [TokenBucket] per Resource Manager
// subscription (see [BucketPerSubscription]).
func PerSubscription() RuleOption { return perKey(BucketPerSubscription) }

// PerDeployment keeps the rule's [TokenBucket] per Azure OpenAI deployment
// (see [BucketPerDeployment]).
func PerDeployment() RuleOption { return perKey(BucketPerDeployment) }

// bucketKeyOf is the bucket a request takes its token from.
func bucketKeyOf(k BucketKey, in matchInput) string {
	switch k {
	case BucketPerHost:
		return string(BucketPerHost) + "=" + in.host
	case BucketPerSubscription:
		if id := pathSegmentAfter(in.path, "subscriptions"); id != "" {
			return string(BucketPerSubscription) + "=" + id
		}
		return string(BucketPerHost) + "=" + in.host
	case BucketPerDeployment:
		if strings.HasPrefix(strings.ToLower(in.path), "/openai/deployments/") {
			if d := pathSegmentAfter(in.path, "deployments"); d != "" {
				return string(BucketPerDeployment) + "=" + d
			}
		}
		return string(BucketPerHost) + "=" + in.host
	}
	return string(BucketPerAccount) + "=" + in.account
}

// pathSegmentAfter is the path segment after the segment key
// (case-insensitive), lower-cased; "" when there is none.
func pathSegmentAfter(path, key string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(segs); i++ {
		if strings.EqualFold(segs[i], key) {
			return strings.ToLower(segs[i+1])
		}
	}
	return ""
}

// setQuotaHeaders sets the remaining-quota headers of the bucket rules
// that were asked about the request (the first that says wins).
func setQuotaHeaders(h http.Header, method string, ds []Decision) {
	for _, d := range ds {
		if d.quota == "" || d.TokensLeft == nil {
			continue
		}
		v := strconv.Itoa(*d.TokensLeft)
		switch d.quota {
		case QuotaOpenAI:
			h.Set("x-ratelimit-remaining-requests", v)
			h.Set("x-ratelimit-reset-requests", resetForm(d.refill))
		case QuotaARM:
			if method == http.MethodGet || method == http.MethodHead {
				h.Set("x-ms-ratelimit-remaining-subscription-reads", v)
			} else {
				h.Set("x-ms-ratelimit-remaining-subscription-writes", v)
			}
		}
		return
	}
}

// resetForm writes a reset as OpenAI does: a Go duration rounded up to
// the millisecond, at least 1 ms ("1ms", "120ms", "1s", "1.5s", "6m0s").
func resetForm(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return (max(ms, 1) * time.Millisecond).String()
}
