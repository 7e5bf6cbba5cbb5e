package fakeserver

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rules by time and by rate, as Azure throttles ("for 2 s", "200 requests a
// second per account"), on the server's clock read at each arrival.

// TimeWindow is the span of a [Window] rule: [Start, Start+Duration).
type TimeWindow struct {
	// Start is when the window opens; the zero Start opens it at the
	// first request the rule is asked about ([Window]).
	Start time.Time
	// Duration is how long the window stays open; 0 means no window.
	Duration time.Duration
}

// String describes the window: "window=[08:49:40Z,+2s)" or
// "window=[first,+2s)".
func (w TimeWindow) String() string {
	start := "first"
	if !w.Start.IsZero() {
		start = w.Start.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("window=[%s,+%s)", start, w.Duration)
}

// BucketKey says what a [TokenBucket] keeps one bucket per.
type BucketKey string

// The keys of a token bucket.
const (
	// BucketPerAccount keeps a bucket per storage account: the path's
	// account segment when the server recognises it ([WithAccount]), else
	// the first label of a host name with a dot (myaccount of
	// myaccount.blob.core.windows.net), else the server's account (one
	// bucket for a plain-layout server on an IP address). The default.
	BucketPerAccount BucketKey = "account"
	// BucketPerHost keeps a bucket per Host header, port included, as a
	// service-wide limit of one endpoint.
	BucketPerHost BucketKey = "host"
	// BucketPerSubscription keeps a bucket per Resource Manager
	// subscription: the segment after /subscriptions/ in the path (as
	// Resource Manager throttles), else the Host header.
	BucketPerSubscription BucketKey = "subscription"
	// BucketPerDeployment keeps a bucket per Azure OpenAI deployment: the
	// segment after /openai/deployments/ in the path, else the Host
	// header.
	BucketPerDeployment BucketKey = "deployment"
)

// Bucket is the token bucket of a [TokenBucket] rule.
type Bucket struct {
	// Rate is the refill in tokens per second; 0 means no bucket.
	Rate float64
	// Burst is the bucket's size: the requests that pass at once when it
	// is full, as it is at first.
	Burst int
	// Key is what one bucket is kept per; "" is [BucketPerAccount].
	Key BucketKey
	// Quota is the remaining-quota headers the rule's responses carry
	// ([QuotaHeaders]); "" sends none.
	Quota QuotaForm
}

// String describes the bucket: "bucket=200/s,burst=50,per=account", with
// ",quota=openai" (or arm) when it sends the remaining-quota headers.
func (b Bucket) String() string {
	s := fmt.Sprintf("bucket=%s/s,burst=%d,per=%s", strconv.FormatFloat(b.Rate, 'g', -1, 64), b.Burst, b.key())
	if b.Quota != "" {
		s += ",quota=" + string(b.Quota)
	}
	return s
}

func (b Bucket) key() BucketKey {
	return cmp.Or(b.Key, BucketPerAccount)
}

// interval is the time one token takes to come back, 1/Rate rounded to the
// nanosecond (at least 1 ns).
func (b Bucket) interval() time.Duration {
	return max(time.Duration(math.Round(float64(time.Second)/b.Rate)), 1)
}

// Bounds of a token bucket, so that every computation stays within a
// time.Duration.
const (
	minBucketRate  = 0.001 // one token per 1,000 s
	maxBucketRate  = 1e9
	maxBucketBurst = 1_000_000
	// maxBuckets bounds the buckets one rule keeps; beyond it, full buckets
	// (the same as none) are dropped, else one at random.
	maxBuckets = 4096
)

// Window makes the rule fire only on requests that arrive inside [start,
// start+d) on the server's clock; the zero start opens it, once, at the
// first request the rule is asked about (one it matches whose count
// condition holds). With [RetryAfterRemaining] the Retry-After is the time
// left, rounded up (2 at start for d = 2 s, 1 from 1 s on). With [Nth] or
// [Times] every condition must hold. It panics when d <= 0.
func Window(start time.Time, d time.Duration) RuleOption {
	if d <= 0 {
		panic("fakeserver: Window: the duration must be above 0")
	}
	return func(r *Rule) { r.Window = TimeWindow{Start: start, Duration: d} }
}

// TokenBucket makes the rule fire only on requests that find no token in
// their bucket: burst tokens, full at first, refilled at rate per second;
// a request that passes takes one. A bucket is kept per storage account by
// default ([PerHost], [PerSubscription], [PerDeployment] say otherwise).
// With [RetryAfterRemaining] the Retry-After is the time to the next token,
// rounded up; inside a [Window] the bucket applies only in the window. The
// refill is exact (GCRA, one token every 1/rate to the nanosecond). It
// panics when rate is not in [0.001, 1e9] or burst not in [1, 1,000,000].
func TokenBucket(rate float64, burst int) RuleOption {
	if _, err := checkBucket(rate, burst); err != nil {
		panic("fakeserver: TokenBucket: " + err.Error())
	}
	return func(r *Rule) { r.Bucket.Rate, r.Bucket.Burst = rate, burst }
}

// PerAccount keeps the rule's [TokenBucket] per storage account (see
// [BucketPerAccount]); it is the default.
func PerAccount() RuleOption { return perKey(BucketPerAccount) }

// PerHost keeps the rule's [TokenBucket] per Host header (see
// [BucketPerHost]).
func PerHost() RuleOption { return perKey(BucketPerHost) }

// PerSubscription keeps the rule's [TokenBucket] per Resource Manager
// subscription (see [BucketPerSubscription]).
func PerSubscription() RuleOption { return perKey(BucketPerSubscription) }

// PerDeployment keeps the rule's [TokenBucket] per Azure OpenAI deployment
// (see [BucketPerDeployment]).
func PerDeployment() RuleOption { return perKey(BucketPerDeployment) }

// perKey keeps the rule's bucket per k.
func perKey(k BucketKey) RuleOption { return func(r *Rule) { r.Bucket.Key = k } }

// checkBucket checks a bucket's rate and burst; on failure it names the
// field at fault.
func checkBucket(rate float64, burst int) (field string, err error) {
	if math.IsNaN(rate) || rate < minBucketRate || rate > maxBucketRate {
		return "token_bucket.rate", fmt.Errorf("rate %v out of range [%v, %v] tokens per second", rate, minBucketRate, float64(maxBucketRate))
	}
	if burst < 1 || burst > maxBucketBurst {
		return "token_bucket.burst", fmt.Errorf("burst %d out of range [1, %d]", burst, maxBucketBurst)
	}
	return "", nil
}

// validateTimed checks the window, the bucket and a remaining Retry-After.
func (r *Rule) validateTimed() (field string, err error) {
	b := r.Bucket
	if b.Rate != 0 || b.Burst != 0 {
		field, err = checkBucket(b.Rate, b.Burst)
	}
	switch {
	case r.Window.Duration < 0:
		return "window.duration", errors.New("the duration must be above 0")
	case r.Window.Duration == 0 && !r.Window.Start.IsZero():
		return "window.duration", errors.New("a window needs a duration")
	case err != nil:
		return field, err
	case b.Key != "" && !slices.Contains([]BucketKey{BucketPerAccount, BucketPerHost, BucketPerSubscription, BucketPerDeployment}, b.Key):
		return "token_bucket.key", fmt.Errorf("unknown bucket key %q (want account, host, subscription or deployment)", string(b.Key))
	case b.Key != "" && b.Rate == 0:
		return "token_bucket.key", errors.New("a bucket key needs a token bucket")
	case b.Quota != "" && b.Quota != QuotaOpenAI && b.Quota != QuotaARM:
		return "token_bucket.quota_headers", fmt.Errorf("unknown quota headers %q (want openai or arm)", string(b.Quota))
	case b.Quota != "" && b.Rate == 0:
		return "token_bucket.quota_headers", errors.New("quota headers need a token bucket")
	case r.Fault.retryAfter.remaining() && !r.timed():
		return "retry_after.form", fmt.Errorf("the %s form needs a window or a token bucket on the rule", r.Fault.retryAfter.form)
	}
	return "", nil
}

// timed reports whether the rule has a window or a bucket.
func (r *Rule) timed() bool { return r.Window.Duration > 0 || r.Bucket.Rate > 0 }

// Decision is what one rule by time or by rate decided about one request,
// as the ledger keeps it ([Request.Decisions]).
type Decision struct {
	// Rule is the rule's index in the script.
	Rule int `json:"rule"`
	// Kind is "token_bucket" for a rule with a bucket, "window" for one
	// with a window only.
	Kind string `json:"kind"`
	// Key is the bucket the request was counted in: "account=NAME",
	// "host=HOST:PORT", "subscription=ID" or "deployment=NAME"; "" without
	// a bucket, or outside the rule's window.
	Key string `json:"key,omitempty"`
	// Fired reports whether the rule fired.
	Fired bool `json:"fired"`
	// TokensLeft is the whole tokens left in the bucket after the decision
	// (0 when it fired); nil without a bucket, or outside the window.
	TokensLeft *int `json:"tokens_left,omitempty"`
	// quota: the headers the response carries for TokensLeft (setQuotaHeaders).
	quota QuotaForm
	// refill: the time until the bucket is full again, after the
	// decision (x-ratelimit-reset-requests); 0 without quota
	// headers.
	refill time.Duration
	// WindowEnd is when the rule's window ends; zero without a window.
	WindowEnd time.Time `json:"window_end,omitzero"`
	// Wait is, when the rule fired, the time to the bucket's next token
	// (with a bucket) or to the window's end: the remaining Retry-After
	// before rounding up.
	Wait time.Duration `json:"wait_ns,omitempty"`
}

// String describes the decision: "rule 0 token_bucket account=x
// tokens_left=0 fired wait=5ms".
func (d Decision) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %d %s", d.Rule, d.Kind)
	if d.Key != "" {
		b.WriteString(" " + d.Key)
	}
	if d.TokensLeft != nil {
		fmt.Fprintf(&b, " tokens_left=%d", *d.TokensLeft)
	}
	if !d.WindowEnd.IsZero() {
		b.WriteString(" window_end=" + d.WindowEnd.UTC().Format(time.RFC3339Nano))
	}
	if d.Fired {
		fmt.Fprintf(&b, " fired wait=%s", d.Wait)
	} else {
		b.WriteString(" passed")
	}
	return b.String()
}

func cloneDecisions(ds []Decision) []Decision {
	out := slices.Clone(ds) // nil stays nil
	for i, d := range out {
		if d.TokensLeft != nil {
			out[i].TokensLeft = new(*d.TokensLeft)
		}
	}
	return out
}

// timedState is a rule's state by time and by rate, guarded by the
// Script's lock.
type timedState struct {
	opened time.Time            // a zero-start window: when it opened
	full   map[string]time.Time // bucket key -> when that bucket is full again (GCRA's TAT + interval)
	latest time.Time            // the latest arrival the buckets have seen
}

// decide asks the rule's window and bucket about a request arriving at
// in.now, taking a token when one is there, and returns the decision.
func (r *ruleState) decide(in matchInput) Decision {
	d := Decision{Kind: "window"}
	if r.Bucket.Rate > 0 {
		d.Kind = "token_bucket"
	}
	var windowLeft time.Duration
	if r.Window.Duration > 0 {
		start := r.Window.Start
		if start.IsZero() {
			if r.opened.IsZero() {
				r.opened = in.now
			}
			start = r.opened
		}
		end := start.Add(r.Window.Duration)
		d.WindowEnd = end
		if in.now.Before(start) || !in.now.Before(end) {
			return d
		}
		windowLeft = end.Sub(in.now)
	}
	if r.Bucket.Rate <= 0 {
		d.Fired, d.Wait = true, windowLeft
		return d
	}
	key := bucketKeyOf(r.Bucket.key(), in)
	d.Key = key
	left, wait := r.take(key, in.now)
	d.TokensLeft = &left
	d.quota = r.Bucket.Quota
	if d.quota != "" {
		d.refill = r.full[key].Sub(r.latest) // take set both
	}
	if wait > 0 {
		d.Fired, d.Wait = true, wait
	}
	return d
}

// take takes one token of bucket key at now: it returns the whole tokens
// left and 0, or, when the bucket has no whole token, 0 and the time to
// the next one. The bucket is kept as the time it is full again: at now it
// holds Burst - (full - now)/interval tokens.
func (r *ruleState) take(key string, now time.Time) (left int, wait time.Duration) {
	if r.full == nil {
		r.full = map[string]time.Time{}
	}
	// Arrivals are stamped before the script's lock is taken, so two
	// concurrent requests can reach the bucket out of order by a few
	// microseconds; the later-stamped one must not make the earlier one
	// short of a fraction of a token (a 429 with a wait of 40 µs). The
	// buckets' clock never goes back: an earlier stamp is taken as the
	// latest one seen.
	if now.Before(r.latest) {
		now = r.latest
	}
	r.latest = now
	iv := r.Bucket.interval()
	size := time.Duration(r.Bucket.Burst) * iv
	full, ok := r.full[key]
	if !ok || full.Before(now) {
		full = now
	}
	// A token is there when the bucket is at least one interval from empty.
	if debt := full.Sub(now); debt > size-iv {
		return 0, debt - (size - iv)
	}
	full = full.Add(iv)
	if !ok && len(r.full) >= maxBuckets {
		r.dropBuckets(now)
	}
	r.full[key] = full
	return int((size - full.Sub(now)) / iv), 0
}

// dropBuckets makes room for a new bucket: it forgets the buckets that are
// full at now (as good as none) and, when none is, one bucket at random
// (which starts full again if its key comes back).
func (r *ruleState) dropBuckets(now time.Time) {
	n := len(r.full)
	maps.DeleteFunc(r.full, func(_ string, full time.Time) bool { return !full.After(now) })
	if len(r.full) < n {
		return
	}
	for k := range r.full {
		delete(r.full, k)
		return
	}
}

// requestAccount is the storage account a request addresses, for a
// per-account bucket: see [BucketPerAccount].
func requestAccount(configured, path, host string) string {
	if configured != "" && servicePath(configured, path) != path {
		return configured
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if label, _, ok := strings.Cut(h, "."); ok && label != "" && net.ParseIP(h) == nil && !strings.Contains(h, ":") {
		return label
	}
	return configured
}

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
		if d := pathSegmentAfter(in.path, "deployments"); d != "" && strings.HasPrefix(strings.ToLower(in.path), "/openai/deployments/") {
			return string(BucketPerDeployment) + "=" + d
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
