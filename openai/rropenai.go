// Package rropenai wires the readrecovery transport into the OpenAI Go
// client, github.com/openai/openai-go/v3, and its Azure OpenAI options, in
// one call:
//
//	rt := rropenai.NewTransport() // shared restrictions by Azure's scopes; or readrecovery.New(base, ...)
//	client := rropenai.NewClient(rt,
//		azure.WithEndpoint("https://my-resource.openai.azure.com", "2024-10-21"),
//		azure.WithAPIKey(key), // or azure.WithTokenCredential(cred)
//	)
//
// or, with options of your own, append [Options] to them:
//
//	client := openai.NewClient(append(myOptions, rropenai.Options(rt)...)...)
//
// # Who retries a 429
//
// openai-go retries 408, 409, 429 and every 5xx for every method, twice by
// default (internal/requestconfig: shouldRetry, checked at v3.98.0), file
// uploads (POST /files) and vector-store file batches included: a
// throttled upload would be sent again, up to three times. With rropenai,
// the 429s the readrecovery policy owns (docs/policy.md,
// "one-owner-per-429") are never retried by openai-go, and the ones
// openai-go keeps are retried through the scope's room and not-before
// (docs/policy.md, "caller-retry"):
//
//	request                          429                            other statuses
//	GET with a Budget                readrecovery (one wait, re-sent  openai-go
//	                                 once, never by openai-go)
//	GET without a Budget, HEAD,      openai-go, each attempt held     openai-go
//	OPTIONS, TRACE                   at the scope's not-before and
//	                                 room (shared restrictions)
//	inference POST (the list below)  openai-go, each attempt held     openai-go
//	without a Budget                 likewise; never re-sent by
//	                                 readrecovery
//	inference POST with a Budget,    readrecovery: returned to you,   openai-go
//	every other POST, PUT, PATCH,    sent once; with a Budget its
//	DELETE, any other method         delay holds the sequence
//
// One client serves both inference and file workflows: no second client
// without rropenai is needed for openai-go's retry of chat completions.
// The tests of this package pin that table against openai-go's real retry
// loop and the bundled fake (TestOwnershipMatrix, TestOwns).
//
// # Inference calls
//
// The inference list is the POSTs whose path ends in one of these (after
// any prefix: /v1, Azure's /openai/deployments/{deployment}, /openai/v1),
// read from openai-go v3.98.0's services. Each answers from the model and
// keeps nothing the caller did not ask to keep, so a 429 (the server did
// not take the request) is safely tried again:
//
//	chat/completions         Chat.Completions.New, NewStreaming. With store: true the
//	                         server keeps the completion, but only one it answered.
//	completions              the legacy Completions.New.
//	embeddings               Embeddings.New.
//	responses                Responses.New (borderline: it stores the response by
//	                         default; a throttled one was never created).
//	responses/input_tokens   token counting; nothing stored.
//	responses/compact        compaction of a conversation's input; nothing stored
//	                         (borderline: beta).
//	moderations              Moderations.New.
//	audio/speech             text to speech.
//	audio/transcriptions,    speech to text (borderline: a multipart upload of the
//	audio/translations       audio; a retry re-sends its bytes but stores nothing).
//	images/generations,      image generation (borderline for edits and variations,
//	images/edits,            multipart uploads of the source image, stored nowhere).
//	images/variations
//
// Not on it, so owned and sent once: uploads (files, uploads and their
// parts, vector-store files and file batches), jobs and objects a
// duplicate would create twice (batches, fine_tuning/jobs, videos and
// their edits and extensions, assistants, threads and runs, conversations,
// containers, evals, realtime sessions and client secrets), a stored
// completion's metadata update (POST chat/completions/{id}), a response's
// cancel, and every POST of a newer API not yet read. A PUT, PATCH or
// DELETE on a listed path stays owned too.
//
// With a Budget in its context an inference call is readrecovery's, as
// every mutation of a sequence is: sent once, its delay holding the
// sequence's other requests.
//
// # How
//
// [Middleware], installed with option.WithMiddleware, marks each attempt
// of a request openai-go retries (not [Owns]) with
// readrecovery.WithCallerRetry before it goes on: the transport then
// never re-sends it nor enters it in its repeat guard, and under shared
// restrictions (on by default in [NewTransport]) holds it until its
// scope's known not-before and room, so that none of openai-go's attempts
// is sent inside a restriction the process knows of. The hold never
// shortens a wait: a place beyond 30 s returns
// readrecovery.ErrSequenceStopped (reason restricted) at once, which the
// middleware keeps openai-go from retrying (below). The hold is part of
// the attempt: option.WithRequestTimeout and the call's context bound it.
// Its 429 restricts the scope for every other request of the transport,
// Budget or not.
//
// On exactly the 429s readrecovery owns, the middleware sets the response
// header x-should-retry: false.
// openai-go honours that header before it looks at the status, on every
// attempt, whatever the caller's option.WithMaxRetries or
// option.WithMaxRetryDelay say; every other response reaches openai-go's
// retry unchanged. It was chosen over the alternatives because it composes
// with a caller's own options: option.WithMaxRetries(0) would take retries
// away from 503 and from the 429s openai-go keeps; openai-go has no status
// list to edit; a custom HTTPDoer is refused by the azure options; and
// rewriting the status would change the error the caller sees (an
// *openai.Error with StatusCode 429 and the server's retry-after-ms and
// Retry-After headers is what comes back).
//
// openai-go also retries every transport error, and readrecovery's own
// decisions are errors: a stopped sequence (readrecovery.ErrSequenceStopped),
// a refused request (readrecovery.ErrRequestRefused, for example a
// journaled upload whose outcome is on record), a refused redirect. Such a
// retry would fail again before the network, but only after openai-go's
// backoff (0.5 s, 1 s, ... up to 8 s). The middleware therefore returns
// those errors together with a placeholder response carrying x-should-retry:
// false, which openai-go's loop reads before it retries an error; the error
// is what the call returns. A middleware of yours placed around it that drops
// the response when there is an error brings the (harmless) retries back.
//
// # Waits
//
// Azure OpenAI answers 429 with retry-after-ms beside Retry-After. The
// readrecovery transport takes a valid retry-after-ms as a floor: a
// Retry-After of 8 with a retry-after-ms of 20000 is a 20 s wait, and a floor
// above 30 s (or above what remains of the sequence's total) stops the
// sequence; it is never shortened. The 429s left to openai-go are waited as
// openai-go does (v3.98.0: retry-after-ms, else Retry-After, up to 2
// minutes, else its backoff capped at 8 s; with option.WithMaxRetryDelay a
// longer server delay ends its retries instead), each attempt held until
// the scope's not-before when readrecovery knows a later one.
//
// # Token-limit 429s
//
// Azure OpenAI's per-deployment token limit answers 429 too
// (x-ratelimit-remaining-tokens: 0, retry-after-ms). Without a Budget,
// openai-go retries it after its retry-after-ms, and readrecovery holds
// that attempt until the deployment's not-before (Retry-After in whole
// seconds is never shortened), then passes it through the deployment's
// room: 30 concurrent chat completions against a 10/s deployment all
// complete with 2 429s in most runs (2 to 3 seen), where openai-go alone
// completes 7 with 72
// (TestConcurrentChatsAgainstBucket). The scope is the deployment
// (readrecovery.AzureScope: openai:{resource}/{deployment}), so one
// deployment's limit holds no other.
//
// # Journaled uploads
//
// Files.New and VectorStores.FileBatches.New can carry a readrecovery
// journal, so that a batch of uploads survives a restriction longer than a
// process (such as a 60 s retry-after-ms) exactly as a File batch does:
//
//	ctx := readrecovery.WithJournal(readrecovery.WithBudget(ctx, b), j)
//	f, err := client.Files.New(journal.WithUpload(ctx, id), params)
//
// Mark each upload with journal.WithUpload and the file's plan ID, never
// the same ID for two files. openai-go writes a random multipart boundary on
// every call, so a second Files.New of the same file is a new request to
// readrecovery's repeat guard; the journal is what refuses it
// (replay-refused) once the file's upload is on record.
//
// # Traps
//
//   - Options sets the client's HTTP client: an option.WithHTTPClient after
//     it replaces readrecovery. To put another transport (otelhttp, a proxy)
//     beneath readrecovery, make it readrecovery.New's base.
//   - azure.WithUnsafeAllowHTTP with a plain-http loopback endpoint makes
//     openai-go's azure options send through a transport of their own, not
//     the client's: readrecovery is bypassed there (TestUnsafeHTTPBypasses).
//     Over https, the client's transport is used.
package rropenai

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
)

// HeaderShouldRetry is the response header openai-go's retry loop reads
// before the status: "false" ends its retries.
const HeaderShouldRetry = "x-should-retry"

// Options returns the openai-go request options that put t beneath the
// client with the ownership of the package documentation:
// option.WithHTTPClient([HTTPClient](t)) and option.WithMiddleware([Middleware]).
// Pass them to openai.NewClient (or to a service constructor) after any
// option.WithHTTPClient of yours. A nil t means [NewTransport]().
func Options(t *readrecovery.Transport) []option.RequestOption {
	return []option.RequestOption{
		option.WithHTTPClient(HTTPClient(t)),
		option.WithMiddleware(Middleware),
	}
}

// NewClient returns openai.NewClient(opts..., Options(t)...): an openai-go
// client whose requests go through t. opts are not modified.
func NewClient(t *readrecovery.Transport, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append(slices.Clone(opts), Options(t)...)...)
}

// HTTPClient returns an http.Client over t that returns redirects instead
// of following them (readrecovery refuses a request produced by following
// one). A nil t means [NewTransport]().
func HTTPClient(t *readrecovery.Transport) *http.Client {
	if t == nil {
		t = NewTransport()
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// NewTransport returns [NewTransportOver](nil, opts...): shared
// restrictions by Azure's scopes, in the process's one table: one
// deployment's 429 holds that deployment's other sequences, its Budget
// requests are handed to the network only while it has room, and each of
// openai-go's attempts of an inference call or a read without a Budget
// waits for the deployment's not-before and room ([Middleware]). It
// is what a nil t of [Options], [NewClient] and [HTTPClient] means. Pass
// readrecovery.WithoutSharedRestrictions() to turn them off; a transport
// you make with readrecovery.New has them only when you ask.
func NewTransport(opts ...readrecovery.Option) *readrecovery.Transport {
	return NewTransportOver(nil, opts...)
}

// NewTransportOver returns readrecovery.New(base, opts...) with this
// package's defaults before opts: shared restrictions through the
// process's one table keyed by Azure's scopes
// (readrecovery.WithScopes(readrecovery.AzureScopes())), the table every
// client of the process shares, rrazure's included. Give it a base of your
// own (TLS settings, a proxy, otelhttp.NewTransport) to keep the defaults
// over it: rropenai.NewClient(rropenai.NewTransportOver(base)). A nil
// base is go-cleanhttp's pooled transport.
func NewTransportOver(base http.RoundTripper, opts ...readrecovery.Option) *readrecovery.Transport {
	return readrecovery.New(base, append([]readrecovery.Option{readrecovery.WithScopes(scopes())}, opts...)...)
}

// scopes is the table the defaults share: the process's (tests of this
// package swap it for a table of each transport's own, export_test.go).
var scopes = readrecovery.AzureScopes

// Middleware is the openai-go middleware of [Options]. A request whose 429
// openai-go keeps (not [Owns]: an inference call or a read without a
// Budget) goes on marked readrecovery.WithCallerRetry, so that the
// transport holds each of openai-go's attempts at its scope's not-before
// and room and never re-sends or guards it. On a 429 whose request
// readrecovery owns it sets [HeaderShouldRetry] to "false", replacing what
// the server sent, so that openai-go does not retry it; on an error of
// readrecovery's own decisions (readrecovery.ErrSequenceStopped,
// ErrRequestRefused, ErrRedirectRefused) it returns the error with a
// placeholder response carrying the same header, so that openai-go does not
// retry that either (the call returns the error). Every other response and
// error passes unchanged.
func Middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	owned, sent := Owns(req), req
	if !owned {
		sent = req.WithContext(readrecovery.WithCallerRetry(req.Context()))
	}
	resp, err := next(sent)
	switch {
	case err != nil:
		if resp == nil && decided(err) {
			return notRetried(req), err
		}
	case resp != nil && resp.StatusCode == http.StatusTooManyRequests && owned:
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		resp.Header.Set(HeaderShouldRetry, "false")
	}
	return resp, err
}

// Owns reports whether readrecovery decides the 429 of req: a GET whose
// context carries a readrecovery.Budget, an inference call (a POST of the
// package documentation's list, such as chat/completions or embeddings)
// whose context carries one, and every other mutation (every method but
// GET, HEAD, OPTIONS and TRACE, with or without a Budget: uploads, file
// batches, deletes, jobs). A nil req counts as owned: a mutation must
// never be retried by openai-go.
func Owns(req *http.Request) bool {
	if req == nil {
		return true
	}
	switch req.Method {
	case "", http.MethodGet:
		return readrecovery.BudgetFrom(req.Context()) != nil
	case http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	case http.MethodPost:
		if inference(req) {
			return readrecovery.BudgetFrom(req.Context()) != nil
		}
	}
	return true
}

// inferencePaths are the calls whose 429 openai-go keeps without a Budget
// (the package documentation says why each is on the list): the last
// segments of a POST's path, after any prefix (/v1, Azure's
// /openai/deployments/{deployment}, /openai/v1).
var inferencePaths = []string{
	"/chat/completions",
	"/completions",
	"/embeddings",
	"/responses",
	"/responses/input_tokens",
	"/responses/compact",
	"/moderations",
	"/audio/speech",
	"/audio/transcriptions",
	"/audio/translations",
	"/images/generations",
	"/images/edits",
	"/images/variations",
}

// inference reports whether req (a POST) is one of inferencePaths.
func inference(req *http.Request) bool {
	if req.URL == nil {
		return false
	}
	p := strings.TrimSuffix(req.URL.Path, "/")
	for _, s := range inferencePaths {
		if strings.HasSuffix(p, s) {
			return true
		}
	}
	return false
}

// decided reports whether err is one of readrecovery's own decisions.
func decided(err error) bool {
	return errors.Is(err, readrecovery.ErrSequenceStopped) ||
		errors.Is(err, readrecovery.ErrRequestRefused) ||
		errors.Is(err, readrecovery.ErrRedirectRefused)
}

// notRetried is the placeholder response returned beside a decided error.
func notRetried(req *http.Request) *http.Response {
	return &http.Response{
		Status:     "000 not sent (readrecovery decided)",
		StatusCode: 0,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{http.CanonicalHeaderKey(HeaderShouldRetry): {"false"}},
		Body:       http.NoBody,
		Request:    req,
	}
}
