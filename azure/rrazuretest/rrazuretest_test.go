package rrazuretest_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/readrecovery/readrecovery/azure/rrazuretest"
)

type answer int

func (a answer) Do(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: int(a), Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// CountTries counts one per azcore try: 4 for a status azcore retries to
// its default limit (MaxRetries 3), 1 for a success.
func TestCountTriesCountsEveryAzcoreTry(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   int32
	}{
		{http.StatusServiceUnavailable, 4},
		{http.StatusOK, 1},
	} {
		var n atomic.Int32
		o := policy.ClientOptions{
			Transport:        answer(tc.status),
			Retry:            policy.RetryOptions{RetryDelay: 1, MaxRetryDelay: 1},
			PerRetryPolicies: []policy.Policy{rrazuretest.CountTries(&n)},
		}
		pl := runtime.NewPipeline("rrazuretest", "v0.0.0", runtime.PipelineOptions{}, &o)
		req, err := runtime.NewRequest(context.Background(), http.MethodGet, "https://example.invalid/x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pl.Do(req); err != nil {
			t.Fatal(err)
		}
		if got := n.Load(); got != tc.want {
			t.Errorf("status %d: counted %d tries, want %d", tc.status, got, tc.want)
		}
	}
}
