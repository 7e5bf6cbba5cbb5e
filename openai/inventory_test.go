package rropenai_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/otelattr"
)

// listAll lists the whole inventory with Files.ListAutoPaging, 4 files a
// page, oldest first, and returns the IDs and the pager's error.
func listAll(ctx context.Context, c openai.Client) ([]string, error) {
	pager := c.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(4), Order: openai.FileListParamsOrderAsc})
	var ids []string
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
	}
	return ids, pager.Err()
}

// seedInventory stores 20 files: 5 pages of 4.
func seedInventory(srv *fakeserver.Server) []string {
	var ids []string
	for i := range 20 {
		ids = append(ids, srv.AddOpenAIFile(fmt.Sprintf("doc-%02d.txt", i+1), "assistants", []byte{byte(i)}).ID)
	}
	return ids
}

// throttlePage makes the n-th page request a 429 as Azure OpenAI sends it.
func throttlePage(srv *fakeserver.Server, n int, ms int64, seconds int64) {
	srv.Script().Add(fakeserver.RouteOpenAIFileList,
		fakeserver.Throttle(fakeserver.RetryAfterSeconds(seconds)).WithRetryAfterMs(ms, false), fakeserver.Nth(n))
}

// TestInventoryOneWindow: the 5 pages of one inventory share one Budget.
// A 429 on page 2 (retry-after-ms 1500, Retry-After 2) is the sequence's
// one wait: page 2 is re-sent by readrecovery exactly 2 s later, the
// inventory completes in 6 requests, and openai-go sends nothing of its
// own. The wait is one readrecovery.wait span and one log record.
func TestInventoryOneWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		want := seedInventory(e.srv)
		throttlePage(e.srv, 2, 1500, 2)
		b := readrecovery.NewBudget("inventory")
		ids, err := listAll(readrecovery.WithBudget(context.Background(), b), e.client)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("listed %v, %v; want all 20 files", ids, err)
		}
		sent := e.ledger(fakeserver.RouteOpenAIFileList)
		if got := statuses(sent); got != "200 429 200 200 200 200" {
			t.Fatalf("the fake answered %s", got)
		}
		if g := gaps(sent); g[1] != 2*time.Second || g[0] != 0 || g[2] != 0 || g[3] != 0 || g[4] != 0 {
			t.Fatalf("gaps %v, want one wait of exactly 2s (page 2's re-send)", g)
		}
		r := b.Report()
		if r.Requests != 6 || r.Waits != 1 || r.Window == nil || r.Window.Trigger != "read-429" || r.Stop != "" {
			t.Fatalf("report %v", r)
		}

		waits := named(e.spans.GetSpans(), otelattr.WaitSpanName)
		if len(waits) != 1 {
			t.Fatalf("%d wait spans, want 1:\n%s", len(waits), spanDump(e.spans.GetSpans()))
		}
		w := waits[0]
		if attr(w, string(otelattr.WaitTrigger)) != "read-429" || attr(w, string(otelattr.WaitPlannedSeconds)) != "2" ||
			attr(w, string(otelattr.RequestID)) != sent[1].RequestID || attr(w, string(otelattr.HTTPRequestMethod)) != "GET" {
			t.Fatalf("wait span %s", spanDump(waits))
		}
		if w.EndTime.Sub(w.StartTime) != 2*time.Second {
			t.Fatalf("wait span lasted %v, want 2s", w.EndTime.Sub(w.StartTime))
		}
		logs := e.logs.records(t)
		if len(logs) != 1 || logs[0]["msg"] != "readrecovery: wait" || logs[0]["level"] != "INFO" ||
			logs[0]["trigger"] != "read-429" || logs[0]["planned_seconds"] != 2.0 || logs[0]["request_id"] != sent[1].RequestID {
			t.Fatalf("logs %v", logs)
		}
		assertNoSecret(t, e)
	})
}

// TestInventorySecond429Stops: a second 429 (page 4) after the sequence
// used its wait stops the inventory: the 429 comes back from
// ListAutoPaging, openai-go does not retry it, and nothing more is sent.
// The stop is a span event (on a readrecovery.stop span of its own: the
// request had no span) and one warning record.
func TestInventorySecond429Stops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		want := seedInventory(e.srv)
		throttlePage(e.srv, 2, 1500, 2)
		throttlePage(e.srv, 5, 1500, 2) // the 5th list request: page 4
		b := readrecovery.NewBudget("inventory")
		start := time.Now()
		ids, err := listAll(readrecovery.WithBudget(context.Background(), b), e.client)
		if statusOf(err) != 429 {
			t.Fatalf("err = %v, want page 4's 429", err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want[:12]) {
			t.Fatalf("listed %v, want the first 3 pages", ids)
		}
		sent := e.ledger(fakeserver.RouteOpenAIFileList)
		if got := statuses(sent); got != "200 429 200 200 429" {
			t.Fatalf("the fake answered %s", got)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("the inventory took %v, want exactly its one 2s wait", d)
		}
		r := b.Report()
		if r.Requests != 5 || r.Waits != 1 || r.Stop != readrecovery.StopOpportunityUsed {
			t.Fatalf("report %v", r)
		}
		// A further page of the stopped sequence fails before the network,
		// at once, and openai-go does not retry that either.
		before := time.Now()
		_, err = e.client.Files.List(readrecovery.WithBudget(context.Background(), b), openai.FileListParams{Limit: openai.Int(4)})
		if !errors.Is(err, readrecovery.ErrSequenceStopped) || time.Since(before) != 0 || len(e.ledger("")) != 5 {
			t.Fatalf("after the stop: err %v after %v, %d requests", err, time.Since(before), len(e.ledger("")))
		}

		spans := e.spans.GetSpans()
		if n := len(named(spans, otelattr.WaitSpanName)); n != 1 {
			t.Fatalf("%d wait spans, want 1", n)
		}
		stops := named(spans, otelattr.StopSpanName)
		var reasons []string
		for _, s := range stops {
			for _, ev := range s.Events {
				if ev.Name == otelattr.StopEventName {
					for _, a := range ev.Attributes {
						if a.Key == otelattr.StopReason {
							reasons = append(reasons, a.Value.AsString())
						}
					}
				}
			}
		}
		if fmt.Sprint(reasons) != "[opportunity-used]" {
			t.Fatalf("stop events %v, want [opportunity-used]:\n%s", reasons, spanDump(spans))
		}
		var levels []string
		for _, l := range e.logs.records(t) {
			levels = append(levels, fmt.Sprint(l["level"], " ", l["msg"], " ", l["reason"]))
		}
		if fmt.Sprint(levels) != "[INFO readrecovery: wait <nil> WARN readrecovery: sequence stopped opportunity-used]" {
			t.Fatalf("logs %v", levels)
		}
		assertNoSecret(t, e)
	})
}

// TestInventoryWithoutBudget: without a Budget the same two 429s are
// openai-go's: each page is retried after exactly its retry-after-ms, and
// the inventory completes in 7 requests.
func TestInventoryWithoutBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		want := seedInventory(e.srv)
		throttlePage(e.srv, 2, 1500, 2)
		throttlePage(e.srv, 5, 1500, 2)
		ids, err := listAll(context.Background(), e.client)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("listed %v, %v", ids, err)
		}
		sent := e.ledger(fakeserver.RouteOpenAIFileList)
		if got := statuses(sent); got != "200 429 200 200 429 200 200" {
			t.Fatalf("the fake answered %s", got)
		}
		if g := gaps(sent); g[1] != 1500*time.Millisecond || g[4] != 1500*time.Millisecond {
			t.Fatalf("gaps %v, want openai-go's 1.5s waits after each 429", g)
		}
		if len(e.spans.GetSpans()) != 0 || e.logs.String() != "" {
			t.Fatalf("a request without a Budget left spans or logs: %s %s", spanDump(e.spans.GetSpans()), e.logs)
		}
	})
}

func statuses(rs []fakeserver.Request) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(r.Status)
	}
	return s
}

// assertNoSecret checks that the API key reached no span and no log.
func assertNoSecret(t *testing.T, e *env) {
	t.Helper()
	if d := spanDump(e.spans.GetSpans()); strings.Contains(d, apiKey) {
		t.Fatalf("the API key is in a span:\n%s", d)
	}
	if strings.Contains(e.logs.String(), apiKey) {
		t.Fatalf("the API key is in the log:\n%s", e.logs)
	}
}
