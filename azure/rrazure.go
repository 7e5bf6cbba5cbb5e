// Package rrazure plugs the readrecovery transport into the Azure SDK for
// Go in one line:
//
//	client, err := azblob.NewClientWithSharedKeyCredential(url, cred,
//		&azblob.ClientOptions{ClientOptions: rrazure.ClientOptions()})
//
// Every azcore-based client (azblob, azfile, the AI Search data-plane
// clients, ...) takes the same [policy.ClientOptions], embedded in its own
// options type.
//
// What it changes, and why:
//
//   - The transport becomes an http.Client over [readrecovery.New]: 429 on
//     reads is recovered within each request's [readrecovery.Budget] (one
//     delay per sequence, GET only), and redirects are returned to the
//     caller, never followed.
//   - 429 leaves azcore's retry status codes. By default azcore's retry
//     policy retries 408, 429, 500, 502, 503 and 504 for every method, a PUT
//     or POST included: a throttled index creation or file upload would be
//     sent again up to three times, whatever its outcome was. With 429 taken
//     out, a mutation that met 429 goes back to the caller as azcore's
//     *azcore.ResponseError after exactly one send, and only readrecovery
//     decides about 429 (a GET re-sent once; a mutation's Retry-After kept
//     for the next GET of its sequence).
//   - Everything else stays azcore's: 408 and 5xx are still retried by
//     azcore's policy with its delays, as are transport errors. The
//     transport's own stop errors (readrecovery.ErrSequenceStopped, a refused
//     redirect) are NonRetriable, so azcore does not retry them either.
//
// A request without a Budget in its context passes through readrecovery
// untouched: its 429 is returned to the caller at once (azcore no longer
// retries it). Put a Budget in the context of every call of a sequence:
//
//	ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("checkpoint"))
//
// A per-call [policy.WithRetryOptions] replaces the client's retry options
// as a whole: a caller that uses it must take 429 out itself, with
// [RetryStatusCodes].
//
// The base transport of [ClientOptions] is go-cleanhttp's pooled transport,
// not azcore's default http.Client (which adds HTTP/2 health-check pings and
// TLS renegotiation for client certificates); where those matter, build the
// base yourself and use [Apply]. [Apply] is also the way to put otelhttp
// beneath readrecovery, so that each attempt is its own client span:
//
//	var o policy.ClientOptions
//	rrazure.Apply(&o, readrecovery.New(otelhttp.NewTransport(cleanhttp.DefaultPooledTransport())))
package rrazure

import (
	"net/http"
	"slices"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/readrecovery/readrecovery"
)

// defaultRetryStatusCodes are azcore's default retry status codes without
// 429. azcore's own list (408, 429, 500, 502, 503, 504) is in setDefaults of
// sdk/azcore/runtime/policy_retry.go and documented on
// policy.RetryOptions.StatusCodes (sdk/azcore/policy/policy.go), checked at
// azcore v1.24.0; TestDefaultsMatchAzcore probes the azcore this module
// builds with, so a change there fails the tests.
var defaultRetryStatusCodes = []int{
	http.StatusRequestTimeout,      // 408
	http.StatusInternalServerError, // 500
	http.StatusBadGateway,          // 502
	http.StatusServiceUnavailable,  // 503
	http.StatusGatewayTimeout,      // 504
}

// ClientOptions returns azcore client options whose transport is
// readrecovery.New(nil, opts...) (go-cleanhttp's pooled transport beneath)
// behind an http.Client that returns redirects, and whose retry policy keeps
// azcore's defaults except for 429 (see [RetryStatusCodes]). Set other
// fields on the result as usual; to use another base transport (such as
// otelhttp.NewTransport), call [Apply] instead.
func ClientOptions(opts ...readrecovery.Option) policy.ClientOptions {
	var o policy.ClientOptions
	Apply(&o, readrecovery.New(nil, opts...))
	return o
}

// Apply plugs t into o: o.Transport becomes an http.Client over t that
// returns redirects instead of following them, o.Retry.StatusCodes loses
// 429 ([RetryStatusCodes]; nil becomes azcore's defaults without 429), and a
// caller's o.Retry.ShouldRetry, which azcore consults instead of the status
// codes, is wrapped so that it is never asked about a 429. Every other field
// of o is kept. A nil t means readrecovery.New(nil). A nil o does nothing.
func Apply(o *policy.ClientOptions, t *readrecovery.Transport) {
	if o == nil {
		return
	}
	if t == nil {
		t = readrecovery.New(nil)
	}
	o.Transport = &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	o.Retry.StatusCodes = RetryStatusCodes(o.Retry.StatusCodes)
	if should := o.Retry.ShouldRetry; should != nil {
		o.Retry.ShouldRetry = func(resp *http.Response, err error) bool {
			if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
				return false
			}
			return should(resp, err)
		}
	}
}

// RetryStatusCodes returns codes without 429, for
// policy.RetryOptions.StatusCodes. A nil codes stands for azcore's defaults,
// so the result is 408, 500, 502, 503 and 504. An empty, non-nil codes
// (azcore: no status is retried) stays empty and non-nil. codes is not
// modified.
func RetryStatusCodes(codes []int) []int {
	if codes == nil {
		return slices.Clone(defaultRetryStatusCodes)
	}
	out := make([]int, 0, len(codes))
	for _, c := range codes {
		if c != http.StatusTooManyRequests {
			out = append(out, c)
		}
	}
	return out
}
