package rrazure_test

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

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
