package rropenai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// chatPath is the chat completions path of the Azure deployment gpt-4o.
const chatPath = "/openai/deployments/gpt-4o/chat/completions"

// The bodies of the inference calls the upstream answers, as the OpenAI
// API does.
const (
	chatJSON      = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`
	embeddingJSON = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":1,"total_tokens":1}}`
)

// inferenceUpstream is the upstream of the fake's proxy: it answers chat
// completions and embeddings (which the fake does not serve) with 200 and
// hands every other request to files, a fake serving the Files API.
type inferenceUpstream struct{ files http.RoundTripper }

func (u inferenceUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	var body string
	switch p := req.URL.Path; {
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/chat/completions"):
		body = chatJSON
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/embeddings"):
		body = embeddingJSON
	default:
		return u.files.RoundTrip(req)
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"upstream-1"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// newAzureOpenAIFake is a TLS fake of an Azure OpenAI resource, in
// process: the fake's proxy (its script, ledger and Azure OpenAI headers)
// in front of an upstream that serves inference and the Files API.
func newAzureOpenAIFake(t *testing.T) *fakeserver.Server {
	t.Helper()
	files := fakeserver.New()
	u, _ := url.Parse(azureEndpoint)
	srv := fakeserver.NewProxy(u, nil, fakeserver.WithUpstreamTransport(inferenceUpstream{files.Transport()}))
	t.Cleanup(func() { _ = srv.Close(); _ = files.Close() })
	return srv
}

// azureClient is one openai-go client with the azure options over rt, or
// over the fake alone (openai-go's own retry only) when rt is nil.
func azureClient(srv *fakeserver.Server, rt *readrecovery.Transport, opts ...option.RequestOption) openai.Client {
	all := append([]option.RequestOption{azure.WithEndpoint(azureEndpoint, "2024-10-21"), azure.WithAPIKey(apiKey)}, opts...)
	if rt == nil {
		return openai.NewClient(append(all, option.WithHTTPClient(&http.Client{Transport: srv.Transport()}))...)
	}
	return rropenai.NewClient(rt, all...)
}

// rropenaiTransport is rropenai.NewTransport() over the fake: shared
// restrictions by readrecovery.AzureScope.
func rropenaiTransport(srv *fakeserver.Server) *readrecovery.Transport {
	return readrecovery.New(srv.Transport(), readrecovery.WithSharedRestrictions(readrecovery.AzureScope))
}

func chat(ctx context.Context, c openai.Client) (*openai.ChatCompletion, error) {
	return c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
}

// TestInferenceRetriedByOpenAIGo (docs/policy.md: caller-retry): with one
// rropenai client and no Budget, a chat completion whose first try meets
// 429 (retry-after-ms 1500, Retry-After 2) ends ok: openai-go retries it
// after its 1.5 s, and readrecovery holds that attempt at the scope's
// not-before, +2 s (the whole-second Retry-After is never shortened), so
// that nothing is sent inside the known restriction. An embeddings call
// of the same deployment sent meanwhile (+0.5 s) waits for T too, and
// goes first: the release hands out places in the order they were asked
// for, one pace step (10 ms) apart. openai-go alone sends the embeddings
// call at once and the chat's retry at +1.5 s. The same client's throttled upload reaches
// the fake once, also under option.WithMaxRetries(5).
func TestInferenceRetriedByOpenAIGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rr    bool
		chats string
		embed string
	}{
		// The embeddings call asked first: its place in the release is
		// T, the chat's the next, one pace step (10 ms) later.
		{"rropenai", true, "429@0s 200@2.01s", "200@2s"},
		{"openai-go alone", false, "429@0s 200@1.5s", "200@500ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newAzureOpenAIFake(t)
				srv.Script().Add(fakeserver.RouteOther, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(1500, false),
					fakeserver.Method(http.MethodPost), fakeserver.MatchPath(chatPath), fakeserver.Nth(1))
				var rt *readrecovery.Transport
				if tc.rr {
					rt = rropenaiTransport(srv)
				}
				client := azureClient(srv, rt)
				start := time.Now()
				var wg sync.WaitGroup
				wg.Go(func() {
					time.Sleep(500 * time.Millisecond) // after the 429
					if _, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
						Model: "gpt-4o", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")},
					}); err != nil {
						t.Errorf("embeddings: %v", err)
					}
				})
				got, err := chat(context.Background(), client)
				wg.Wait()
				if err != nil || got.Choices[0].Message.Content != "hello" {
					t.Fatalf("chat = %v, %v; want the completion", got, err)
				}
				var chats, embeds []string
				for _, r := range srv.Requests() {
					at := fmt.Sprintf("%d@%v", r.Status, r.Arrived.Sub(start))
					switch r.Path {
					case chatPath:
						chats = append(chats, at)
					case "/openai/deployments/gpt-4o/embeddings":
						embeds = append(embeds, at)
					default:
						t.Fatalf("the fake saw %s %s", r.Method, r.Path)
					}
				}
				if got := strings.Join(chats, " "); got != tc.chats {
					t.Fatalf("the fake saw chats %s, want %s", got, tc.chats)
				}
				if got := strings.Join(embeds, " "); got != tc.embed {
					t.Fatalf("the fake saw embeddings %s, want %s", got, tc.embed)
				}
				if !tc.rr {
					return
				}
				srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(2000, false), fakeserver.Always())
				for _, opts := range [][]option.RequestOption{nil, {option.WithMaxRetries(5)}} {
					before := srv.Count(fakeserver.RouteOpenAIFileUpload, http.MethodPost)
					_, err := client.Files.New(context.Background(), openai.FileNewParams{
						File: openai.File(strings.NewReader("row\n"), "a.jsonl", "application/jsonl"), Purpose: openai.FilePurposeAssistants}, opts...)
					if statusOf(err) != 429 {
						t.Fatalf("upload: %v, want the 429 back", err)
					}
					if n := srv.Count(fakeserver.RouteOpenAIFileUpload, http.MethodPost) - before; n != 1 {
						t.Fatalf("the fake saw %d uploads (options %d), want 1", n, len(opts))
					}
				}
			})
		})
	}
}

// TestConcurrentChatsAgainstBucket is the scenario: 30 concurrent
// chat completions, no Budget, against an Azure OpenAI deployment's
// TokenBucket(10/s, burst 5) that answers 429 with retry-after-ms (the
// time to its next token), Retry-After in whole seconds and
// x-ratelimit-remaining-requests with x-ratelimit-reset-requests. Both contenders in one test, counted in
// the fake's ledger: openai-go alone retries each 429 after its
// retry-after-ms, all together, and completes 7 of 30 with 72 429s; with
// one rropenai client every attempt passes the deployment's room and
// not-before, and it completes at least as many with at most half the
// 429s.
func TestConcurrentChatsAgainstBucket(t *testing.T) {
	type result struct{ ok, throttled, sent, later int } // later: 429s after the first instant
	run := func(t *testing.T, rr bool) result {
		var res result
		synctest.Test(t, func(t *testing.T) {
			srv := newAzureOpenAIFake(t)
			srv.Script().Add(fakeserver.RouteOther, fakeserver.Throttle(fakeserver.RetryAfterRemainingMs()),
				fakeserver.Method(http.MethodPost), fakeserver.MatchPath(chatPath), fakeserver.Always(),
				fakeserver.TokenBucket(10, 5), fakeserver.PerDeployment(), fakeserver.QuotaHeaders(fakeserver.QuotaOpenAI))
			var rt *readrecovery.Transport
			if rr {
				rt = rropenaiTransport(srv)
			}
			client := azureClient(srv, rt)
			start := time.Now()
			var wg sync.WaitGroup
			var mu sync.Mutex
			ok := 0
			for range 30 {
				wg.Go(func() {
					if c, err := chat(context.Background(), client); err == nil && c.Choices[0].Message.Content == "hello" {
						mu.Lock()
						ok++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for _, r := range srv.Requests() {
				if r.Path != chatPath {
					t.Fatalf("the fake saw %s %s", r.Method, r.Path)
				}
				res.sent++
				switch r.Status {
				case http.StatusOK:
					res.ok++
				case http.StatusTooManyRequests:
					res.throttled++
					if r.Arrived.After(start) {
						res.later++
					}
				}
			}
			if res.ok != ok {
				t.Fatalf("the fake answered %d chats 200, the callers got %d completions", res.ok, ok)
			}
		})
		return res
	}
	alone := run(t, false)
	with := run(t, true)
	t.Logf("openai-go alone: %d of 30 completed, %d 429s, %d sent; rropenai: %d of 30, %d 429s (%d after 0 s), %d sent",
		alone.ok, alone.throttled, alone.sent, with.ok, with.throttled, with.later, with.sent)
	if alone != (result{7, 72, 79, 47}) {
		t.Errorf("openai-go alone: %+v, want 7 completed, 72 429s (47 after 0 s), 79 sent", alone)
	}
	// rropenai: all 30 complete; after the first instant exactly one 429,
	// the one the release needs to learn the bucket's rate (docs/policy.md:
	// release-ramp), and none after that. At 0 s, 1 429 in most runs (25
	// of 30), 2 in the others: responses that come back at the same
	// instant bound the room by the quota they report in the order the
	// scheduler runs them, so more than one request can be in flight when
	// the bucket empties.
	if with.ok != 30 || with.later != 1 || with.throttled < 2 || with.sent != with.ok+with.throttled {
		t.Errorf("rropenai: %+v, want 30 completed, 1 429 after 0 s and at least 1 at 0 s, nothing else sent", with)
	}
	if with.ok < alone.ok || 2*with.throttled > alone.throttled {
		t.Errorf("rropenai: %+v; want at least %d completed with at most %d 429s", with, alone.ok, alone.throttled/2)
	}
}

// TestReadWithoutBudgetHeld: a read without a Budget is openai-go's to
// retry too, and through rropenai its attempts are held likewise: a
// Files.Get whose first try meets 429 (retry-after-ms 1500, Retry-After 2)
// is retried by openai-go at +1.5 s and reaches the fake at +2 s, once
// more; openai-go alone sends it at +1.5 s.
func TestReadWithoutBudgetHeld(t *testing.T) {
	for _, tc := range []struct {
		rr   bool
		want string
	}{{true, "429@0s 200@2s"}, {false, "429@0s 200@1.5s"}} {
		t.Run(fmt.Sprint("rropenai=", tc.rr), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				f := srv.AddOpenAIFile("a.txt", "assistants", []byte("a"))
				srv.Script().Add(fakeserver.RouteOpenAIFileGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(1500, false), fakeserver.Nth(1))
				var rt *readrecovery.Transport
				if tc.rr {
					rt = rropenaiTransport(srv)
				}
				client := azureClient(srv, rt)
				start := time.Now()
				got, err := client.Files.Get(context.Background(), f.ID)
				if err != nil || got.ID != f.ID {
					t.Fatalf("Get = %v, %v", got, err)
				}
				var seen []string
				for _, r := range srv.Requests() {
					seen = append(seen, fmt.Sprintf("%d@%v", r.Status, r.Arrived.Sub(start)))
				}
				if s := strings.Join(seen, " "); s != tc.want {
					t.Fatalf("the fake saw %s, want %s", s, tc.want)
				}
			})
		})
	}
}
