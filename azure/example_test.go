package rrazure_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
)

// The options every azcore-based client takes; with azblob:
//
//	azblob.NewClientWithSharedKeyCredential(url, cred,
//		&azblob.ClientOptions{ClientOptions: rrazure.ClientOptions()})
func ExampleClientOptions() {
	o := rrazure.ClientOptions()
	fmt.Println("status codes:", o.Retry.StatusCodes, "(azcore's defaults)")
	fmt.Println("429 ownership decided by ShouldRetry:", o.Retry.ShouldRetry != nil)
	// Output:
	// status codes: [] (azcore's defaults)
	// 429 ownership decided by ShouldRetry: true
}

// Apply keeps the caller's retry options for what readrecovery does not
// own: here a HEAD or a GET without a Budget that meets 429 or 503 is
// retried up to 5 times by azcore; a PUT that meets 429 is sent once.
func ExampleApply() {
	o := policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 5, StatusCodes: []int{429, 503}}}
	rrazure.Apply(&o, readrecovery.New(nil))
	fmt.Println(o.Retry.MaxRetries, o.Retry.StatusCodes)
	// Output: 5 [429 503]
}

// A per-call override that puts 429 back into azcore, unwrapped: azcore
// tries the throttled PUT again, and the transport refuses that try before
// the network, because Apply marked the call as one operation. The server
// sees the PUT once, with or without a Budget.
func ExampleApply_perCallRetryOptions() {
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		puts.Add(1)
		w.Header().Set("Retry-After", "0")
		w.Header().Set("x-ms-request-id", "req-429")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	o := rrazure.ClientOptions()
	pl := runtime.NewPipeline("example", "v0.0.0", runtime.PipelineOptions{}, &o)
	ctx := policy.WithRetryOptions(context.Background(), policy.RetryOptions{StatusCodes: []int{429}, RetryDelay: time.Millisecond})
	req, _ := runtime.NewRequest(ctx, http.MethodPut, srv.URL+"/c/report.json")
	_, err := pl.Do(req)

	var se *readrecovery.StopError
	fmt.Println("PUTs at the server:", puts.Load())
	fmt.Println("refused:", errors.Is(err, readrecovery.ErrRequestRefused))
	if errors.As(err, &se) {
		fmt.Println("the 429 it carries:", se.StatusCode, se.RequestID)
	}
	// Output:
	// PUTs at the server: 1
	// refused: true
	// the 429 it carries: 429 req-429
}
