package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// timedFlags are the command's rules by time and by rate: --window and
// --token-bucket each add one rule (after the script's, the window's
// first), on --route, answering 429 with the remaining Retry-After
// (--retry-after-ms adds retry-after-ms) or, with --server-busy, Storage's
// 503 ServerBusy. --server-busy alone answers every request of --route 503.
type timedFlags struct {
	window       time.Duration
	windowStart  string
	tokenBucket  string
	bucketKey    string
	quota        string
	retryAfterMs bool
	serverBusy   bool
	route        string
}

func (f *timedFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.window, "window", 0, "throttle every request of --route for this `duration` (such as 2s), from the first request or from --window-start; Retry-After is the window's remaining whole seconds")
	fs.StringVar(&f.windowStart, "window-start", "", "when the --window opens: an RFC 3339 `time`, or +DURATION after the start (such as +5s); default: at the first request")
	fs.StringVar(&f.tokenBucket, "token-bucket", "", "throttle the requests of --route that find no token in a bucket of BURST tokens refilled at RATE per second (`RATE,BURST`, such as 200,50); Retry-After is the time to the next token, rounded up")
	fs.StringVar(&f.bucketKey, "bucket-key", "", "what the --token-bucket is kept per: `account` (the default), host, subscription (Resource Manager) or deployment (Azure OpenAI)")
	fs.StringVar(&f.quota, "quota-headers", "", "the --token-bucket's responses carry the remaining quota as `openai` (x-ratelimit-remaining-requests) or arm (x-ms-ratelimit-remaining-subscription-reads/-writes) sends it")
	fs.BoolVar(&f.retryAfterMs, "retry-after-ms", false, "the 429s of --window and --token-bucket also carry retry-after-ms, as Azure OpenAI sends it")
	fs.BoolVar(&f.serverBusy, "server-busy", false, "--window and --token-bucket answer 503 ServerBusy (Azure Storage's XML body, no Retry-After) instead of 429; alone, every request of --route")
	fs.StringVar(&f.route, "route", fakeserver.RouteAny, "the `route` the --window, --token-bucket and --server-busy rules match: search.put, search.get, file.upload, file.list, blob.put, blob.get, other or *")
}

// set reports whether any rule flag is given.
func (f *timedFlags) set() bool {
	return f.window != 0 || f.tokenBucket != "" || f.serverBusy
}

// addRules appends the flags' rules to script; now is the start for a
// relative --window-start. A bad combination or value is an error (a
// usage error for the command).
func (f *timedFlags) addRules(script *fakeserver.Script, now time.Time) error {
	if f.windowStart != "" && f.window == 0 {
		return errors.New("--window-start needs --window")
	}
	if f.bucketKey != "" && f.tokenBucket == "" {
		return errors.New("--bucket-key needs --token-bucket")
	}
	if f.quota != "" && f.tokenBucket == "" {
		return errors.New("--quota-headers needs --token-bucket")
	}
	if f.retryAfterMs && f.serverBusy {
		return errors.New("--retry-after-ms and --server-busy exclude each other (a ServerBusy 503 has no Retry-After)")
	}
	if f.retryAfterMs && f.window == 0 && f.tokenBucket == "" {
		return errors.New("--retry-after-ms needs --window or --token-bucket")
	}
	if f.route != fakeserver.RouteAny && !f.set() {
		return errors.New("--route needs --window, --token-bucket or --server-busy")
	}
	if !f.set() {
		return nil
	}
	if !validRoute(f.route) {
		return fmt.Errorf("--route %q: want search.put, search.get, file.upload, file.list, blob.put, blob.get, other or *", f.route)
	}
	fault := fakeserver.Throttle(fakeserver.RetryAfterRemaining())
	if f.retryAfterMs {
		fault = fakeserver.Throttle(fakeserver.RetryAfterRemainingMs())
	}
	if f.serverBusy {
		fault = fakeserver.ServerBusy()
	}
	var start time.Time
	if f.windowStart != "" {
		var err error
		if start, err = parseWindowStart(f.windowStart, now); err != nil {
			return err
		}
	}
	var bucket []fakeserver.RuleOption
	if f.tokenBucket != "" {
		rate, burst, err := parseTokenBucket(f.tokenBucket)
		if err != nil {
			return err
		}
		bucket = []fakeserver.RuleOption{fakeserver.TokenBucket(rate, burst)}
		switch f.bucketKey {
		case "", "account":
		case "host":
			bucket = append(bucket, fakeserver.PerHost())
		case "subscription":
			bucket = append(bucket, fakeserver.PerSubscription())
		case "deployment":
			bucket = append(bucket, fakeserver.PerDeployment())
		default:
			return fmt.Errorf("--bucket-key %q: want account, host, subscription or deployment", f.bucketKey)
		}
		switch f.quota {
		case "":
		case "openai", "arm":
			bucket = append(bucket, fakeserver.QuotaHeaders(fakeserver.QuotaForm(f.quota)))
		default:
			return fmt.Errorf("--quota-headers %q: want openai or arm", f.quota)
		}
	}
	switch {
	case f.window < 0:
		return fmt.Errorf("--window %v: want a duration above 0", f.window)
	case f.window > 0:
		script.Add(f.route, fault, fakeserver.Window(start, f.window))
	}
	if bucket != nil {
		script.Add(f.route, fault, bucket...)
	}
	if f.window == 0 && bucket == nil { // --server-busy alone
		script.Add(f.route, fault, fakeserver.Always())
	}
	return nil
}

func validRoute(r string) bool {
	switch r {
	case fakeserver.RouteSearchPut, fakeserver.RouteSearchGet, fakeserver.RouteFileUpload, fakeserver.RouteFileList,
		fakeserver.RouteBlobPut, fakeserver.RouteBlobGet, fakeserver.RouteOther, fakeserver.RouteAny:
		return true
	}
	return false
}

// parseWindowStart reads an RFC 3339 time or "+DURATION" after now.
func parseWindowStart(v string, now time.Time) (time.Time, error) {
	if rest, ok := strings.CutPrefix(v, "+"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("--window-start %q: want +DURATION (such as +5s) or an RFC 3339 time", v)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--window-start %q: want +DURATION (such as +5s) or an RFC 3339 time", v)
	}
	return t, nil
}

// parseTokenBucket reads "RATE,BURST" within fakeserver.TokenBucket's
// bounds (rate 0.001 to 1e9 per second, burst 1 to 1,000,000).
func parseTokenBucket(v string) (float64, int, error) {
	bad := fmt.Errorf("--token-bucket %q: want RATE,BURST with RATE from 0.001 to 1e9 tokens per second and BURST from 1 to 1000000 (such as 200,50)", v)
	r, b, ok := strings.Cut(v, ",")
	if !ok {
		return 0, 0, bad
	}
	rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
	if err != nil || math.IsNaN(rate) || rate < 0.001 || rate > 1e9 {
		return 0, 0, bad
	}
	burst, err := strconv.Atoi(strings.TrimSpace(b))
	if err != nil || burst < 1 || burst > 1_000_000 {
		return 0, 0, bad
	}
	return rate, burst, nil
}
