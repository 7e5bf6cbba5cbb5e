package rropenai_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// TestLoopback: the same wiring over a real loopback listener and
// readrecovery's default base transport (go-cleanhttp), with short real
// waits: a throttled upload is sent once; a GET with a Budget meeting
// retry-after-ms 150 (Retry-After 0) is re-sent by readrecovery no earlier
// than 150 ms later (planned from the 429's receipt, so a little under
// 150 ms once the response was read).
func TestLoopback(t *testing.T) {
	srv := fakeserver.New()
	defer srv.Close()
	base, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	rt := readrecovery.New(nil)
	defer rt.CloseIdleConnections()
	client := rropenai.NewClient(rt, option.WithBaseURL(base+"/v1/"), option.WithAPIKey(apiKey))
	f := srv.AddOpenAIFile("a.txt", "assistants", []byte("a"))
	srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)).WithRetryAfterMs(100, false), fakeserver.Always())
	srv.Script().Add(fakeserver.RouteOpenAIFileGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)).WithRetryAfterMs(150, false), fakeserver.Nth(1))

	_, err = client.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(strings.NewReader("x"), "b.txt", "text/plain"), Purpose: openai.FilePurposeAssistants})
	if statusOf(err) != 429 || srv.Count(fakeserver.RouteOpenAIFileUpload, "") != 1 {
		t.Fatalf("upload: %v, sent %d times", err, srv.Count(fakeserver.RouteOpenAIFileUpload, ""))
	}

	b := readrecovery.NewBudget("loopback")
	got, err := client.Files.Get(readrecovery.WithBudget(context.Background(), b), f.ID)
	if err != nil || got.Filename != "a.txt" {
		t.Fatalf("get: %v, %v", got, err)
	}
	gets := (&env{srv: srv}).ledger(fakeserver.RouteOpenAIFileGet)
	if len(gets) != 2 || gaps(gets)[0] < 150*time.Millisecond {
		t.Fatalf("%d GETs, gaps %v: want the re-send at least 150 ms later", len(gets), gaps(gets))
	}
	if r := b.Report(); r.Requests != 2 || r.Waits != 1 || r.WaitLog[0].FloorMs != 150 || r.WaitLog[0].Planned > 150*time.Millisecond || r.WaitLog[0].Planned < 100*time.Millisecond {
		t.Fatalf("report %v, wait %+v", r, r.WaitLog)
	}
}
