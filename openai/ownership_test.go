package rropenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// The statuses of the ownership matrix.
var matrixStatuses = []int{429, 503, 408, 200}

// methodChat is the ownership matrix's inference row: a POST of
// Chat.Completions.New.
const methodChat = "POST chat/completions"

// call sends one request of method through the real openai-go client: the
// API call that uses it (Files.Get, Files.New, Files.Delete,
// Chat.Completions.New for methodChat) or, for HEAD, client.Execute. It
// returns the fake's route for the method.
func call(ctx context.Context, c openai.Client, method, fileID string) (string, error) {
	switch method {
	case methodChat:
		_, err := chat(ctx, c)
		return fakeserver.RouteOther, err
	case http.MethodGet:
		_, err := c.Files.Get(ctx, fileID)
		return fakeserver.RouteOpenAIFileGet, err
	case http.MethodHead:
		return fakeserver.RouteOpenAIFileGet, c.Execute(ctx, http.MethodHead, "files/"+fileID, nil, nil)
	case http.MethodPost:
		_, err := c.Files.New(ctx, openai.FileNewParams{
			File:    openai.File(strings.NewReader("row 1\n"), "doc.jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeAssistants,
		})
		return fakeserver.RouteOpenAIFileUpload, err
	case http.MethodDelete:
		_, err := c.Files.Delete(ctx, fileID)
		return fakeserver.RouteOpenAIFileDelete, err
	}
	panic("method " + method)
}

// script makes every request of route answer status: a 429 as Azure
// OpenAI sends it (retry-after-ms 20000, Retry-After 20), or 503 or 408
// without Retry-After (so openai-go uses its own backoff).
func script(srv *fakeserver.Server, route string, status int) {
	switch status {
	case 429:
		srv.Script().Add(route, fakeserver.Throttle(fakeserver.RetryAfterSeconds(20)).WithRetryAfterMs(20000, false), fakeserver.Always())
	case 503, 408:
		srv.Script().Add(route, fakeserver.Status(status), fakeserver.Always())
	}
}

// TestOwnershipMatrix pins the one-owner-per-429 rule against openai-go's
// real retry loop with its default settings (2 retries: at most 3
// attempts) and the fake's ledger: for each method, with and without a
// Budget, every request answered 429, 503, 408 or 200. A 429 readrecovery
// owns (GET with a Budget, an inference call with a Budget, every other
// mutation) is never retried by openai-go: a GET with a Budget is re-sent
// once by readrecovery after exactly the 20 s the server asked (then
// stops, persistent-429), an upload, a DELETE or a chat completion with a
// Budget is sent once. A chat completion without a Budget is an inference
// call whose 429 openai-go keeps (docs/policy.md: caller-retry), on the
// Azure OpenAI fake (the fake's proxy over an inference upstream). Every
// other 429, and 503 and 408 for every method, is
// retried by openai-go: a 429 after exactly its retry-after-ms, a 503 or
// 408 after its jittered backoff (0.5 s and 1 s, less up to a quarter).
func TestOwnershipMatrix(t *testing.T) {
	type cell struct {
		sends  int
		window string // the Budget's window trigger, "" for none
		stop   readrecovery.StopReason
	}
	for _, row := range []struct {
		method string
		budget bool
		want   [4]cell // by status: 429, 503, 408, 200
	}{
		{http.MethodGet, true, [4]cell{{2, "read-429", readrecovery.StopPersistent429}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodGet, false, [4]cell{{sends: 3}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodHead, true, [4]cell{{sends: 3}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodHead, false, [4]cell{{sends: 3}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodPost, true, [4]cell{{1, "write-429", ""}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodPost, false, [4]cell{{sends: 1}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodDelete, true, [4]cell{{1, "write-429", ""}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{http.MethodDelete, false, [4]cell{{sends: 1}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{methodChat, true, [4]cell{{1, "write-429", ""}, {sends: 3}, {sends: 3}, {sends: 1}}},
		{methodChat, false, [4]cell{{sends: 3}, {sends: 3}, {sends: 3}, {sends: 1}}},
	} {
		for i, status := range matrixStatuses {
			want := row.want[i]
			t.Run(fmt.Sprintf("%s budget=%t %d", row.method, row.budget, status), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					e := newEnv(t)
					if row.method == methodChat {
						srv := newAzureOpenAIFake(t)
						e.srv, e.rt = srv, readrecovery.New(srv.Transport())
						e.client = azureClient(srv, e.rt)
					}
					f := e.srv.AddOpenAIFile("seed.txt", "assistants", []byte("seed"))
					var route string
					switch row.method {
					case methodChat:
						route = fakeserver.RouteOther
					case http.MethodGet, http.MethodHead:
						route = fakeserver.RouteOpenAIFileGet
					case http.MethodPost:
						route = fakeserver.RouteOpenAIFileUpload
					case http.MethodDelete:
						route = fakeserver.RouteOpenAIFileDelete
					}
					script(e.srv, route, status)
					ctx := context.Background()
					var b *readrecovery.Budget
					if row.budget {
						b = readrecovery.NewBudget("matrix")
						ctx = readrecovery.WithBudget(ctx, b)
					}
					_, err := call(ctx, e.client, row.method, f.ID)

					if status == 200 {
						if err != nil {
							t.Fatalf("err = %v, want success", err)
						}
					} else if got := statusOf(err); got != status {
						t.Fatalf("err = %v (status %d), want an *openai.Error with status %d", err, got, status)
					}
					sent := e.ledger(route)
					if len(sent) != want.sends || len(e.srv.Requests()) != want.sends {
						t.Fatalf("the fake saw %d requests (%d of %s), want %d", len(e.srv.Requests()), len(sent), route, want.sends)
					}
					for _, r := range sent {
						if want, _, _ := strings.Cut(row.method, " "); r.Method != want {
							t.Fatalf("the fake saw %s, want only %s", r.Method, want)
						}
					}
					for k, g := range gaps(sent) {
						switch status {
						case 429: // exactly the server's delay: readrecovery's or openai-go's wait
							if g != 20*time.Second {
								t.Fatalf("gap %d = %v, want exactly 20s", k+1, g)
							}
						default: // openai-go's backoff: 0.5 s·2^k, less up to a quarter
							hi := 500 * time.Millisecond << k
							if lo := hi - hi/4; g < lo || g > hi {
								t.Fatalf("gap %d = %v, want openai-go's backoff in [%v, %v]", k+1, g, lo, hi)
							}
						}
					}
					if b != nil {
						r := b.Report()
						if r.Requests != want.sends {
							t.Fatalf("report: %d requests, the fake saw %d", r.Requests, want.sends)
						}
						gotWindow := ""
						if r.Window != nil {
							gotWindow = r.Window.Trigger
						}
						if gotWindow != want.window || r.Stop != want.stop {
							t.Fatalf("report: window %q stop %q, want %q %q", gotWindow, r.Stop, want.window, want.stop)
						}
					}
				})
			})
		}
	}
}

// TestMillisecondFloors: Azure OpenAI's retry-after-ms is a floor on
// readrecovery's wait, never shortened (a Retry-After of 8 with 20000 ms
// is 20 s, not 8 s), and a floor above the 30 s ceiling stops the sequence
// before any re-send. The same 429s without a Budget stay openai-go's,
// which waits what retry-after-ms says. The first GET is throttled, the
// next answered.
func TestMillisecondFloors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ms         int64
		retryAfter fakeserver.RetryAfter
		budget     bool
		sends      int
		gap        time.Duration
		stop       readrecovery.StopReason
		floorMs    int64
	}{
		{"20 s both, Budget", 20000, fakeserver.RetryAfterSeconds(20), true, 2, 20 * time.Second, "", 0},
		{"8 s with a 20 s floor, Budget", 20000, fakeserver.RetryAfterSeconds(8), true, 2, 20 * time.Second, "", 20000},
		{"only a 20 s floor, Budget", 20000, fakeserver.RetryAfterMissing(), true, 2, 20 * time.Second, "", 20000},
		{"20.5 s floor over 20 s, Budget", 20500, fakeserver.RetryAfterSeconds(20), true, 2, 20500 * time.Millisecond, "", 20500},
		{"31 s both, Budget: stops", 31000, fakeserver.RetryAfterSeconds(31), true, 1, 0, readrecovery.StopOverlong, 0},
		{"8 s with a 31 s floor, Budget: stops", 31000, fakeserver.RetryAfterSeconds(8), true, 1, 0, readrecovery.StopOverlong, 0},
		{"20 s both, no Budget: openai-go", 20000, fakeserver.RetryAfterSeconds(20), false, 2, 20 * time.Second, "", 0},
		{"8 s with a 20 s floor, no Budget: openai-go", 20000, fakeserver.RetryAfterSeconds(8), false, 2, 20 * time.Second, "", 0},
		{"31 s, no Budget: openai-go", 31000, fakeserver.RetryAfterSeconds(31), false, 2, 31 * time.Second, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				f := e.srv.AddOpenAIFile("seed.txt", "assistants", []byte("seed"))
				e.srv.Script().Add(fakeserver.RouteOpenAIFileGet, fakeserver.Throttle(tc.retryAfter).WithRetryAfterMs(tc.ms, false), fakeserver.Nth(1))
				ctx := context.Background()
				var b *readrecovery.Budget
				if tc.budget {
					b = readrecovery.NewBudget("floor")
					ctx = readrecovery.WithBudget(ctx, b)
				}
				got, err := e.client.Files.Get(ctx, f.ID)
				sent := e.ledger(fakeserver.RouteOpenAIFileGet)
				if len(sent) != tc.sends {
					t.Fatalf("the fake saw %d GETs, want %d", len(sent), tc.sends)
				}
				if tc.sends == 2 {
					if err != nil || got.ID != f.ID {
						t.Fatalf("Get = %v, %v; want the file", got, err)
					}
					if g := gaps(sent)[0]; g != tc.gap {
						t.Fatalf("wait %v, want exactly %v", g, tc.gap)
					}
				} else if statusOf(err) != 429 {
					t.Fatalf("err = %v, want the 429 back", err)
				}
				if b == nil {
					return
				}
				r := b.Report()
				if r.Stop != tc.stop {
					t.Fatalf("stop %q, want %q", r.Stop, tc.stop)
				}
				if tc.sends == 2 {
					if len(r.WaitLog) != 1 || r.WaitLog[0].Planned != tc.gap || r.WaitLog[0].FloorMs != tc.floorMs {
						t.Fatalf("wait log %+v, want one wait of %v with floor %d ms", r.WaitLog, tc.gap, tc.floorMs)
					}
				}
			})
		})
	}
}

// TestUploadSentOnce: a throttled Files.New reaches the fake exactly once,
// with and without a Budget, under openai-go's default retries and with
// option.WithMaxRetries(5). The control, the same client without
// rropenai, sends the same upload 3 and 6 times.
func TestUploadSentOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wired   bool
		budget  bool
		retries int // -1: openai-go's default
		sends   int
		rrOnly  bool // readrecovery beneath openai-go without rropenai's middleware
	}{
		{"default retries, no Budget", true, false, -1, 1, false},
		{"default retries, Budget", true, true, -1, 1, false},
		{"MaxRetries 5, no Budget", true, false, 5, 1, false},
		{"MaxRetries 5, Budget", true, true, 5, 1, false},
		{"control without rropenai: default retries", false, false, -1, 3, false},
		{"control without rropenai: MaxRetries 5", false, false, 5, 6, false},
		// Without the middleware openai-go retries the 429 itself; its new
		// request repeats the throttled one's method, URL and bytes, so the
		// sequence's repeat-guard refuses it before the network.
		{"readrecovery without the middleware, Budget", false, true, -1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []option.RequestOption
				if tc.retries >= 0 {
					opts = append(opts, option.WithMaxRetries(tc.retries))
				}
				e := newEnv(t, opts...)
				client := e.client
				if !tc.wired {
					var rt http.RoundTripper = e.srv.Transport()
					if tc.rrOnly {
						rt = readrecovery.New(rt)
					}
					client = openai.NewClient(append([]option.RequestOption{option.WithBaseURL(baseURL), option.WithAPIKey(apiKey),
						option.WithHTTPClient(&http.Client{Transport: rt})}, opts...)...)
				}
				e.srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(2000, false), fakeserver.Always())
				ctx := context.Background()
				var b *readrecovery.Budget
				if tc.budget {
					b = readrecovery.NewBudget("upload")
					ctx = readrecovery.WithBudget(ctx, b)
				}
				_, err := call(ctx, client, http.MethodPost, "")
				switch {
				case tc.rrOnly:
					if !errors.Is(err, readrecovery.ErrRequestRefused) {
						t.Fatalf("err = %v, want openai-go's retry refused", err)
					}
				case statusOf(err) != 429:
					t.Fatalf("err = %v, want the 429 back", err)
				}
				if n := e.srv.Count(fakeserver.RouteOpenAIFileUpload, http.MethodPost); n != tc.sends {
					t.Fatalf("the fake saw %d uploads, want %d", n, tc.sends)
				}
				if tc.sends == 1 && !e.srv.AssertNoMutationSentTwice(t) {
					t.Fatal("an upload was sent twice")
				}
				if len(e.srv.OpenAIFiles()) != 0 {
					t.Fatal("a throttled upload was stored")
				}
				if b != nil {
					if r := b.Report(); r.Requests != 1 || len(r.Mutations) != 1 || r.Mutations[0].StatusCode != 429 {
						t.Fatalf("report %v, want one mutation that met 429", r)
					}
				}
			})
		})
	}
}

// TestOwns: the ownership rule on its own.
func TestOwns(t *testing.T) {
	bg := context.Background()
	withBudget := readrecovery.WithBudget(bg, readrecovery.NewBudget("owns"))
	for _, tc := range []struct {
		method string
		ctx    context.Context
		want   bool
	}{
		{"GET", withBudget, true}, {"", withBudget, true}, {"GET", bg, false}, {"", bg, false},
		{"HEAD", withBudget, false}, {"OPTIONS", withBudget, false}, {"TRACE", bg, false},
		{"POST", bg, true}, {"PUT", bg, true}, {"PATCH", withBudget, true}, {"DELETE", bg, true}, {"MERGE", bg, true},
	} {
		req, _ := http.NewRequestWithContext(tc.ctx, tc.method, "https://h/v1/files", nil)
		if got := rropenai.Owns(req); got != tc.want {
			t.Errorf("Owns(%q, budget=%t) = %t, want %t", tc.method, tc.ctx != bg, got, tc.want)
		}
	}
	// The inference list (package documentation): a POST of one of its
	// paths, after any prefix, is openai-go's without a Budget; every
	// other POST (uploads, file batches, jobs, a stored completion's
	// update) and every other method on those paths stays readrecovery's.
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/chat/completions", false},
		{"POST", "/openai/deployments/gpt-4o/chat/completions", false},
		{"POST", "/openai/v1/chat/completions/", false},
		{"POST", "/v1/completions", false},
		{"POST", "/openai/deployments/emb/embeddings", false},
		{"POST", "/v1/responses", false},
		{"POST", "/v1/responses/input_tokens", false},
		{"POST", "/v1/responses/compact", false},
		{"POST", "/v1/moderations", false},
		{"POST", "/v1/audio/speech", false},
		{"POST", "/openai/deployments/whisper/audio/transcriptions", false},
		{"POST", "/v1/audio/translations", false},
		{"POST", "/v1/images/generations", false},
		{"POST", "/v1/images/edits", false},
		{"POST", "/v1/images/variations", false},
		{"POST", "/v1/chat/completions/chatcmpl-1", true}, // updates a stored completion
		{"POST", "/v1/responses/resp_1/cancel", true},
		{"POST", "/v1/files", true},
		{"POST", "/v1/uploads", true},
		{"POST", "/v1/vector_stores/vs_1/file_batches", true},
		{"POST", "/v1/vector_stores/vs_1/files", true},
		{"POST", "/v1/batches", true},
		{"POST", "/v1/fine_tuning/jobs", true},
		{"POST", "/v1/videos", true},
		{"POST", "/v1/realtime/client_secrets", true},
		{"POST", "/v1/conversations", true},
		{"PUT", "/v1/chat/completions", true},
		{"DELETE", "/v1/responses", true},
	} {
		for _, ctx := range []context.Context{bg, withBudget} {
			req, _ := http.NewRequestWithContext(ctx, tc.method, "https://h"+tc.path, nil)
			want := tc.want || ctx == withBudget
			if got := rropenai.Owns(req); got != want {
				t.Errorf("Owns(%s %s, budget=%t) = %t, want %t", tc.method, tc.path, ctx != bg, got, want)
			}
		}
	}
	if !rropenai.Owns(nil) {
		t.Error("Owns(nil) = false, want true")
	}
}
