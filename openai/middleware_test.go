package rropenai_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// TestMiddleware: the header on exactly the owned 429s (replacing what
// the server said), the placeholder beside readrecovery's own errors, and
// everything else untouched.
func TestMiddleware(t *testing.T) {
	stopped := fmt.Errorf("Post: %w", &readrecovery.StopError{Reason: readrecovery.StopOverlong})
	refused := &readrecovery.StopError{Reason: readrecovery.StopReplayRefused}
	other := errors.New("connection reset by peer")
	for _, tc := range []struct {
		name       string
		method     string
		status     int
		header     http.Header
		err        error
		wantHeader string // x-should-retry after the middleware; "-" for no response
	}{
		{"POST 429, server says retry", http.MethodPost, 429, http.Header{"X-Should-Retry": {"true"}}, nil, "false"},
		{"POST 429, nil header", http.MethodPost, 429, nil, nil, "false"},
		{"HEAD 429, server says retry", http.MethodHead, 429, http.Header{"X-Should-Retry": {"true"}}, nil, "true"},
		{"GET 429 without a Budget", http.MethodGet, 429, http.Header{}, nil, ""},
		{"POST 503", http.MethodPost, 503, http.Header{}, nil, ""},
		{"POST 200, server says no retry", http.MethodPost, 200, http.Header{"X-Should-Retry": {"false"}}, nil, "false"},
		{"a stop", http.MethodPost, 0, nil, stopped, "false"},
		{"a refusal", http.MethodGet, 0, nil, refused, "false"},
		{"a transport error", http.MethodPost, 0, nil, other, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "https://h/v1/files", nil)
			next := func(r *http.Request) (*http.Response, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				return &http.Response{StatusCode: tc.status, Header: tc.header, Body: http.NoBody, Request: r}, nil
			}
			resp, err := rropenai.Middleware(req, next)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			got := "-"
			if resp != nil {
				got = resp.Header.Get(rropenai.HeaderShouldRetry)
				if n, _ := io.Copy(io.Discard, resp.Body); n != 0 {
					t.Fatal("a body")
				}
			}
			if got != tc.wantHeader {
				t.Fatalf("x-should-retry %q, want %q", got, tc.wantHeader)
			}
			if tc.err != nil && resp != nil && (resp.StatusCode != 0 || resp.Request != req) {
				t.Fatalf("placeholder %+v", resp)
			}
		})
	}
}

// TestCallersMiddleware: a middleware of the caller's, on the client
// (around rropenai's) or on the call (inside it), sees one attempt of a
// throttled upload; the caller's own option.WithMaxRetries on the call
// does not bring the retry back.
func TestCallersMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var outer, inner []int
		count := func(into *[]int) option.Middleware {
			return func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				resp, err := next(r)
				if resp != nil {
					*into = append(*into, resp.StatusCode)
				}
				return resp, err
			}
		}
		e := newEnv(t, option.WithMiddleware(count(&outer)))
		e.srv.Script().Add(fakeserver.RouteOpenAIFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)).WithRetryAfterMs(1000, false), fakeserver.Always())
		_, err := e.client.Files.New(context.Background(), openai.FileNewParams{
			File: openai.File(strings.NewReader("x"), "a.txt", "text/plain"), Purpose: openai.FilePurposeAssistants},
			option.WithMiddleware(count(&inner)), option.WithMaxRetries(4))
		if statusOf(err) != 429 || fmt.Sprint(outer, inner) != "[429] [429]" || e.srv.Count(fakeserver.RouteOpenAIFileUpload, "") != 1 {
			t.Fatalf("err %v; outer saw %v, inner %v, the fake %d uploads", err, outer, inner, e.srv.Count(fakeserver.RouteOpenAIFileUpload, ""))
		}
	})
}

// TestOptionsWithNilTransport: a nil Transport is readrecovery.New(nil).
func TestOptionsWithNilTransport(t *testing.T) {
	c := rropenai.HTTPClient(nil)
	if _, ok := c.Transport.(*readrecovery.Transport); !ok || c.CheckRedirect == nil {
		t.Fatalf("client %+v", c)
	}
	if n := len(rropenai.Options(nil)); n != 2 {
		t.Fatalf("%d options", n)
	}
	if err := c.CheckRedirect(nil, nil); !errors.Is(err, http.ErrUseLastResponse) {
		t.Fatalf("CheckRedirect = %v", err)
	}
}
