package rrazure_test

import (
	"fmt"
	"net/http"

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
	fmt.Println("azcore retries:", o.Retry.StatusCodes)
	_, isClient := o.Transport.(*http.Client)
	fmt.Println("transport is an http.Client:", isClient)
	// Output:
	// azcore retries: [408 500 502 503 504]
	// transport is an http.Client: true
}

// Apply keeps the caller's other options and takes 429 out of its own
// status codes.
func ExampleApply() {
	o := policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 5, StatusCodes: []int{429, 503}}}
	rrazure.Apply(&o, readrecovery.New(nil))
	fmt.Println(o.Retry.MaxRetries, o.Retry.StatusCodes)
	// Output: 5 [503]
}
