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
//     caller, never followed. Its errors name the request URL without its
//     query, so a SAS signature never ends up in an error message.
//   - The transport of [ClientOptions], and of [Apply] with a nil one, is
//     [NewTransport]: shared restrictions keyed by Azure's own scopes
//     ([readrecovery.AzureScope]; docs/policy.md: azure-scopes), so that a
//     429 of one request holds the other sequences' requests of its
//     subscription, storage account or deployment;
//     readrecovery.WithoutSharedRestrictions() turns it off.
//   - Who retries a 429 depends on the request (docs/policy.md,
//     "one-owner-per-429"): readrecovery decides the 429 of a GET whose
//     context carries a Budget (re-sent once, inside one azcore try) and of
//     every mutation (never re-sent by azcore, with or without a Budget); a
//     mutation is every method but GET, HEAD, OPTIONS and TRACE: PUT, POST,
//     PATCH, DELETE, and also MERGE or any method the module does not know.
//     azcore's retry policy keeps every other 429: a GET without a Budget,
//     HEAD, OPTIONS, TRACE. By
//     default azcore retries 408, 429, 500, 502, 503 and 504 for every
//     method, a PUT or POST included: a throttled index creation or file
//     upload would be sent again up to three times, whatever its outcome
//     was. rrazure installs a [policy.RetryOptions.ShouldRetry] (see
//     [RetryOptions]) that answers "no" for the 429s readrecovery owns and
//     otherwise decides as azcore would with the caller's options.
//   - Each azcore operation is marked as one ([readrecovery.WithOperation],
//     by a per-call policy): once a mutation of it has met 429, the
//     transport refuses its later tries before the network, with or without
//     a Budget, so even retry options that put 429 back into azcore cannot
//     send a throttled mutation twice. The refusal is NonRetriable, matches
//     readrecovery.ErrRequestRefused and carries the 429's status and
//     request ID.
//   - Everything else stays azcore's: 408 and 5xx are still retried by
//     azcore's policy with its delays, as are transport errors. The
//     transport's own stop errors (readrecovery.ErrSequenceStopped, a refused
//     redirect) are NonRetriable, so azcore does not retry them either.
//
// Put a Budget in the context of every call of a sequence:
//
//	ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("checkpoint"))
//
// A per-call [policy.WithRetryOptions] replaces the client's retry options
// as a whole, ShouldRetry included: pass it [RetryOptions](o) to keep the
// same ownership for that call. Unwrapped, a throttled mutation's next try
// is refused (the operation mark above) instead of being given back as
// the 429 response.
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
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/readrecovery/readrecovery"
)

// azcoreDefaultStatusCodes are the status codes azcore's retry policy
// retries when policy.RetryOptions.StatusCodes is nil: setDefaults in
// sdk/azcore/runtime/policy_retry.go, documented on
// policy.RetryOptions.StatusCodes (sdk/azcore/policy/policy.go), checked at
// azcore v1.24.0. TestDefaultsMatchAzcore probes the azcore this module
// builds with, so a change there fails the tests.
var azcoreDefaultStatusCodes = []int{
	http.StatusRequestTimeout,      // 408
	http.StatusTooManyRequests,     // 429
	http.StatusInternalServerError, // 500
	http.StatusBadGateway,          // 502
	http.StatusServiceUnavailable,  // 503
	http.StatusGatewayTimeout,      // 504
}

// ClientOptions returns azcore client options whose transport is
// readrecovery.New(nil, opts...) (go-cleanhttp's pooled transport beneath)
// behind an http.Client that returns redirects, whose retry options are
// [RetryOptions] of azcore's defaults, and whose one per-call policy marks
// each operation (see [Apply]). To set retry options of your own
// (StatusCodes, ShouldRetry) or another base transport (such as
// otelhttp.NewTransport), fill a policy.ClientOptions and call [Apply]:
// StatusCodes set on the result of ClientOptions have no effect, since
// azcore consults ShouldRetry instead.
//
// The transport shares restrictions by Azure's own scopes, in the
// process's one table ([NewTransportOver], SPEC R90-R93, R102):
// a 429 of one request holds the other sequences' requests of its
// subscription, storage account or deployment, and each scope's requests
// are handed to the network only while it has room. opts apply after that
// option: pass readrecovery.WithoutSharedRestrictions() to turn it off, or
// a WithSharedRestrictions of your own to use another scope.
func ClientOptions(opts ...readrecovery.Option) policy.ClientOptions {
	var o policy.ClientOptions
	Apply(&o, NewTransport(opts...))
	return o
}

// NewTransport returns [NewTransportOver](nil, opts...): the transport
// ClientOptions and a nil t of [Apply] use.
func NewTransport(opts ...readrecovery.Option) *readrecovery.Transport {
	return NewTransportOver(nil, opts...)
}

// NewTransportOver returns readrecovery.New(base, opts...) with this
// package's defaults before opts: shared restrictions through the
// process's one table keyed by Azure's scopes
// (readrecovery.WithScopes(readrecovery.AzureScopes()), docs/policy.md:
// azure-scopes), so that every client a program builds, over any base,
// shares each subscription's, account's and deployment's not-before, pace
// and room. Give it a base of your own (TLS settings, a proxy,
// otelhttp.NewTransport) to keep the defaults over it; a nil base is
// go-cleanhttp's pooled transport.
func NewTransportOver(base http.RoundTripper, opts ...readrecovery.Option) *readrecovery.Transport {
	return readrecovery.New(base, append([]readrecovery.Option{readrecovery.WithScopes(scopes())}, opts...)...)
}

// scopes is the table the defaults share: the process's (tests of this
// package swap it for a table of each transport's own, export_test.go).
var scopes = readrecovery.AzureScopes

// Apply plugs t into o: o.Transport becomes an http.Client over t that
// returns redirects instead of following them (and whose errors name the
// request URL without its query), o.Retry becomes [RetryOptions](o.Retry),
// and a per-call policy that marks each operation
// ([readrecovery.WithOperation]) is appended to o.PerCallPolicies (once:
// applying twice adds no second one). Every other field of o is kept. Set
// o.Retry before Apply: its StatusCodes and ShouldRetry are read once,
// here. A nil t means [NewTransport](): shared restrictions by Azure's
// scopes on. A nil o does nothing.
func Apply(o *policy.ClientOptions, t *readrecovery.Transport) {
	if o == nil {
		return
	}
	if t == nil {
		t = NewTransport()
	}
	o.Transport = transporter{c: &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
	o.Retry = RetryOptions(o.Retry)
	if !slices.ContainsFunc(o.PerCallPolicies, isOperationPolicy) {
		// Clip: appending must not write into the caller's backing array.
		o.PerCallPolicies = append(slices.Clip(o.PerCallPolicies), operationPolicy{})
	}
}

// operationPolicy is the per-call policy [Apply] installs. azcore runs a
// per-call policy once per operation (one pipeline call: an Upload, a Put
// Block, a GetProperties), before its retry policy; operationPolicy marks
// the request's context with [readrecovery.WithOperation], and every try
// the retry policy makes derives its context from it. So once a mutation
// of the operation has met 429, the transport refuses the operation's
// later tries before the network (docs/policy.md, "repeat-guard"), with
// or without a Budget, whatever retry options azcore was given: a
// per-call policy.WithRetryOptions that puts 429 back into azcore still
// cannot send a throttled PUT twice. A new call is a new operation.
//
// It also keeps the sequence's stop visible: once the operation's context
// has ended, azcore's retry policy returns the context's bare error in
// place of its transport's (context.Canceled when a Budget's total ran
// out while the request waited, for the journal or a window). When the
// context's cause is readrecovery's stop, operationPolicy returns that
// stop wrapped with the context's error, so that errors.Is(err,
// readrecovery.ErrSequenceStopped) and errors.Is(err, context.Canceled)
// both hold and errors.As finds the *readrecovery.StopError.
type operationPolicy struct{}

func (operationPolicy) Do(req *policy.Request) (*http.Response, error) {
	ctx := req.Raw().Context()
	resp, err := req.WithContext(readrecovery.WithOperation(ctx)).Next()
	if err != nil && ctx.Err() != nil && !errors.Is(err, readrecovery.ErrSequenceStopped) {
		var se *readrecovery.StopError
		if errors.As(context.Cause(ctx), &se) {
			err = fmt.Errorf("%w: %w", se, err)
		}
	}
	return resp, err
}

func isOperationPolicy(p policy.Policy) bool {
	_, ok := p.(operationPolicy)
	return ok
}

// transporter is the policy.Transporter of [Apply]: an http.Client whose
// errors do not carry the request's query. http.Client wraps every error
// of its transport in a *url.Error with the whole URL, a SAS signature
// included; transporter keeps the *url.Error (Op, Err, Timeout) and names
// the URL as scheme://host/path.
type transporter struct{ c *http.Client }

func (t transporter) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.c.Do(req)
	if ue, ok := err.(*url.Error); ok {
		return resp, &url.Error{Op: ue.Op, URL: withoutQuery(req.URL), Err: ue.Err}
	}
	return resp, err
}

// RetryOptions returns o with a ShouldRetry that leaves to readrecovery the
// 429 of a GET whose context carries a Budget and the 429 of every PUT,
// POST, PATCH and DELETE: azcore never retries those. For everything else
// it decides as azcore would have with o: o.ShouldRetry when set, else a
// transport error is retried and a response is retried when its status is
// in o.StatusCodes (nil: azcore's defaults, 429 included; empty: none).
// StatusCodes and ShouldRetry are read once, here; the other fields are
// kept. A response without its Request (a base transport that does not
// set it) cannot be told apart: its 429 is never retried by azcore.
//
// Use it for a per-call override, which replaces the client's retry
// options as a whole:
//
//	ctx = policy.WithRetryOptions(ctx, rrazure.RetryOptions(policy.RetryOptions{MaxRetries: 5}))
func RetryOptions(o policy.RetryOptions) policy.RetryOptions {
	codes := slices.Clone(o.StatusCodes)
	if o.StatusCodes == nil {
		codes = slices.Clone(azcoreDefaultStatusCodes)
	}
	should := o.ShouldRetry
	o.ShouldRetry = func(resp *http.Response, err error) bool {
		if resp != nil && resp.StatusCode == http.StatusTooManyRequests && owned(resp.Request) {
			return false
		}
		if should != nil {
			return should(resp, err)
		}
		if err != nil {
			return true
		}
		return runtime.HasStatusCode(resp, codes...)
	}
	return o
}

// owned reports whether readrecovery decides the 429 of req: a GET with a
// Budget and every mutation ([isMutation]). A nil req, whose method
// is unknown, counts as owned: a mutation must never be re-sent by azcore.
func owned(req *http.Request) bool {
	switch {
	case req == nil:
		return true
	case req.Method == "" || req.Method == http.MethodGet:
		return readrecovery.BudgetFrom(req.Context()) != nil
	}
	return isMutation(req.Method)
}

// isMutation reports whether a request with this method may change server
// state: every method but the safe ones of RFC 9110 section 9.2.1 (GET,
// HEAD, OPTIONS, TRACE; the empty method is net/http's GET). A method the
// module does not know (MERGE, PROPPATCH, "get": methods are
// case-sensitive) counts as one that writes, so its 429 is never azcore's
// to retry.
//
// It is this module's own copy of the rule the readrecovery transport
// applies (a nested module uses only the root's public API, and the root
// does not export it). TestIsMutationMatchesTheTransport asks the
// transport itself, through its Report, so the two cannot drift apart.
func isMutation(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// withoutQuery names u as scheme://host/path: no query (a SAS signature),
// no userinfo, no fragment. A nil u is "".
func withoutQuery(u *url.URL) string {
	if u == nil {
		return ""
	}
	s := u.Host + u.EscapedPath()
	if u.Scheme != "" {
		s = u.Scheme + "://" + s
	}
	return s
}

// RetryStatusCodes returns codes without 429. A nil codes stands for
// azcore's defaults, so the result is 408, 500, 502, 503 and 504. An empty,
// non-nil codes stays empty and non-nil. codes is not modified.
//
// Deprecated: taking 429 out of the status codes takes it away from HEAD,
// OPTIONS and GETs without a Budget too, which keep azcore's retry
// (docs/policy.md, "one-owner-per-429").
// Use [RetryOptions], which [Apply] and [ClientOptions] already apply.
func RetryStatusCodes(codes []int) []int {
	if codes == nil {
		codes = azcoreDefaultStatusCodes
	}
	out := make([]int, 0, len(codes))
	for _, c := range codes {
		if c != http.StatusTooManyRequests {
			out = append(out, c)
		}
	}
	return out
}
