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
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// azureEndpoint is an Azure OpenAI resource on the fake (in-process:
// never resolved).
const azureEndpoint = "https://my-resource.openai.azure.com"

// newAzureClient is an openai-go client with the azure options over e's
// transport.
func newAzureClient(e *env, opts ...option.RequestOption) openai.Client {
	all := append([]option.RequestOption{azure.WithEndpoint(azureEndpoint, "2024-10-21"), azure.WithAPIKey(apiKey)}, opts...)
	return rropenai.NewClient(e.rt, all...)
}

// TestAzureOptions: with openai-go's azure options the calls reach the
// fake under /openai/... with api-version, the API key as Api-Key (never
// in a span or log), and the same ownership: a throttled upload is sent
// once, an inventory page's 429 is readrecovery's one wait, with Azure
// OpenAI's retry-after-ms as a floor (Retry-After 1, retry-after-ms 2500:
// 2.5 s).
func TestAzureOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		client := newAzureClient(e)
		want := seedInventory(e.srv)
		throttlePage(e.srv, 3, 2500, 1)
		e.srv.Script().Add(fakeserver.RouteOpenAIFileUpload,
			fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(2000, false), fakeserver.Always())

		b := readrecovery.NewBudget("azure inventory")
		ids, err := listAll(readrecovery.WithBudget(context.Background(), b), client)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("listed %v, %v", ids, err)
		}
		sent := e.ledger(fakeserver.RouteOpenAIFileList)
		if statuses(sent) != "200 200 429 200 200 200" || gaps(sent)[2] != 2500*time.Millisecond {
			t.Fatalf("the fake answered %s with gaps %v", statuses(sent), gaps(sent))
		}
		for _, r := range sent {
			if r.Path != "/openai/files" || !strings.Contains(fmt.Sprint(r.QueryKeys), "api-version") {
				t.Fatalf("request %s %v, want /openai/files with api-version", r.Path, r.QueryKeys)
			}
		}
		if r := b.Report(); r.Waits != 1 || len(r.WaitLog) != 1 || r.WaitLog[0].FloorMs != 2500 {
			t.Fatalf("report %v", r)
		}

		_, err = client.Files.New(context.Background(), openai.FileNewParams{
			File: openai.File(strings.NewReader("x"), "a.txt", "text/plain"), Purpose: openai.FilePurposeAssistants})
		if statusOf(err) != 429 || e.srv.Count(fakeserver.RouteOpenAIFileUpload, "") != 1 {
			t.Fatalf("upload: %v, the fake saw %d", err, e.srv.Count(fakeserver.RouteOpenAIFileUpload, ""))
		}
		assertNoSecret(t, e)
	})
}

// TestTokenLimit429: a chat completion meeting Azure OpenAI's token limit
// (429, x-ratelimit-remaining-tokens: 0, retry-after-ms 6000) is an
// inference call: without a Budget rropenai leaves its 429 to openai-go,
// which retries it after exactly the 6 s the server asked, twice, as
// openai-go alone does; the last 429 comes back with the server's headers
// for the caller to read. With a Budget it is readrecovery's: sent once,
// its 429 back at once.
func TestTokenLimit429(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wired  bool
		budget bool
		sends  int
	}{
		{"rropenai", true, false, 3},
		{"rropenai, Budget", true, true, 1},
		{"openai-go alone", false, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				client := newAzureClient(e)
				if !tc.wired {
					client = openai.NewClient(azure.WithEndpoint(azureEndpoint, "2024-10-21"), azure.WithAPIKey(apiKey),
						option.WithHTTPClient(&http.Client{Transport: e.srv.Transport()}))
				}
				e.srv.Script().Add(fakeserver.RouteOther,
					fakeserver.Throttle(fakeserver.RetryAfterSeconds(6)).WithRetryAfterMs(6000, true),
					fakeserver.Method("POST"), fakeserver.MatchPath("/openai/deployments/gpt-4o/chat/completions"))
				ctx := context.Background()
				if tc.budget {
					ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("chat"))
				}
				start := time.Now()
				_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model:    "gpt-4o",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
				})
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
					t.Fatalf("err = %v, want the 429", err)
				}
				if h := apiErr.Response.Header; h.Get("retry-after-ms") != "6000" || h.Get("x-ratelimit-remaining-tokens") != "0" {
					t.Fatalf("the caller sees headers %v", h)
				}
				if n := len(e.ledger(fakeserver.RouteOther)); n != tc.sends {
					t.Fatalf("the fake saw %d chat completions, want %d", n, tc.sends)
				}
				if want := time.Duration(tc.sends-1) * 6 * time.Second; time.Since(start) != want {
					t.Fatalf("the call took %v, want %v", time.Since(start), want)
				}
			})
		})
	}
}

// TestUnsafeHTTPBypasses pins a trap of openai-go's azure options (the
// package documentation names it): with azure.WithUnsafeAllowHTTP and a
// plain-http loopback endpoint, requests go through a transport the azure
// options make of their own, not the client's, so readrecovery sees
// nothing. Over a real loopback listener, with a short 429: the Budget
// counts no request although the fake saw one.
func TestUnsafeHTTPBypasses(t *testing.T) {
	srv := fakeserver.New()
	defer srv.Close()
	base, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	rt := readrecovery.New(nil)
	defer rt.CloseIdleConnections()
	client := rropenai.NewClient(rt, azure.WithEndpoint(base, "2024-10-21"), azure.WithAPIKey(apiKey), azure.WithUnsafeAllowHTTP())
	srv.AddOpenAIFile("a.txt", "assistants", []byte("a"))
	b := readrecovery.NewBudget("bypassed")
	page, err := client.Files.List(readrecovery.WithBudget(context.Background(), b), openai.FileListParams{})
	if err != nil || len(page.Data) != 1 {
		t.Fatalf("list: %v", err)
	}
	if n := srv.Count(fakeserver.RouteOpenAIFileList, ""); n != 1 {
		t.Fatalf("the fake saw %d lists", n)
	}
	if r := b.Report(); r.Requests != 0 {
		t.Fatalf("readrecovery counted %d requests: the bypass is gone, update the documentation", r.Requests)
	}
}
