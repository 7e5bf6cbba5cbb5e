package rropenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// Example wires readrecovery into an Azure OpenAI client in one call. The
// Azure OpenAI resource here is the bundled fake, in process: a throttled
// upload comes back once, never re-sent by openai-go, and an inventory
// page's 429 is the sequence's one wait.
func Example() {
	srv := fakeserver.New()
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)).WithRetryAfterMs(0, false), fakeserver.Nth(1))
	srv.Script().Add(fakeserver.RouteOpenAIFileList, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)).WithRetryAfterMs(0, false), fakeserver.Nth(1))

	rt := readrecovery.New(srv.Transport()) // readrecovery.New(nil) against a real endpoint
	client := rropenai.NewClient(rt,
		azure.WithEndpoint("https://my-resource.openai.azure.com", "2024-10-21"),
		azure.WithAPIKey("key"),
	)

	ctx := context.Background()
	_, err := client.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader("a,b\n"), "rows.csv", "text/csv"),
		Purpose: openai.FilePurposeAssistants,
	})
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		fmt.Println("upload:", apiErr.StatusCode, "sent", srv.Count(fakeserver.RouteOpenAIFileUpload, ""), "time")
	}

	srv.AddOpenAIFile("a.txt", "assistants", []byte("a"))
	b := readrecovery.NewBudget("inventory")
	pager := client.Files.ListAutoPaging(readrecovery.WithBudget(ctx, b), openai.FileListParams{})
	for pager.Next() {
		fmt.Println("listed", pager.Current().Filename)
	}
	r := b.Report()
	fmt.Println("inventory:", pager.Err(), "requests", r.Requests, "waits", r.Waits, r.Window.Trigger)
	// Output:
	// upload: 429 sent 1 time
	// listed a.txt
	// inventory: <nil> requests 2 waits 1 read-429
}

// Example_oneClient is the one client for inference and uploads, on a TLS
// fake of Azure OpenAI in process (the fake's proxy over an upstream that
// answers chat completions). A chat completion whose first try meets 429
// keeps openai-go's retry, held until the deployment's not-before; a
// throttled upload is sent once, whatever option.WithMaxRetries says.
func Example_oneClient() {
	files := fakeserver.New()
	defer files.Close()
	u, _ := url.Parse("https://my-resource.openai.azure.com")
	srv := fakeserver.NewProxy(u, nil, fakeserver.WithUpstreamTransport(inferenceUpstream{files.Transport()}))
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteOther, fakeserver.Throttle(fakeserver.RetryAfterMissing()).WithRetryAfterMs(200, false),
		fakeserver.MatchPath(chatPath), fakeserver.Nth(1))
	srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)).WithRetryAfterMs(200, false), fakeserver.Always())

	// rropenai.NewTransport() against a real endpoint: shared restrictions
	// by readrecovery.AzureScope.
	rt := readrecovery.New(srv.Transport(), readrecovery.WithSharedRestrictions(readrecovery.AzureScope))
	client := rropenai.NewClient(rt,
		azure.WithEndpoint("https://my-resource.openai.azure.com", "2024-10-21"),
		azure.WithAPIKey("key"),
	)

	ctx := context.Background()
	c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	if err == nil {
		fmt.Println("chat:", c.Choices[0].Message.Content, "after", srv.Count(fakeserver.RouteOther, ""), "requests")
	}
	_, err = client.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader("a,b\n"), "rows.csv", "text/csv"),
		Purpose: openai.FilePurposeAssistants,
	}, option.WithMaxRetries(5))
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		fmt.Println("upload:", apiErr.StatusCode, "sent", srv.Count(fakeserver.RouteOpenAIFileUpload, ""), "time")
	}
	// Output:
	// chat: hello after 2 requests
	// upload: 429 sent 1 time
}
