package fakeserver_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// A File inventory whose second page is throttled with an RFC 850 date,
// served in-process with a fixed clock. The ledger shows what the server
// saw.
func Example() {
	clock := time.Date(1994, time.November, 6, 8, 49, 40, 0, time.UTC)
	srv := fakeserver.New(fakeserver.WithClock(func() time.Time { return clock }))
	defer srv.Close()
	for i := range 3 {
		srv.AddFile(fmt.Sprintf("part-%d", i), []byte{byte(i)})
	}
	srv.Script().Add(fakeserver.RouteFileList,
		fakeserver.Throttle(fakeserver.RetryAfterDate(fakeserver.RFC850, 2*time.Second)),
		fakeserver.Nth(2))

	client := &http.Client{Transport: srv.Transport()}
	for _, url := range []string{
		"http://files.test/files?limit=2",
		"http://files.test/files?limit=2&after=file-000002&sig=SECRET",
	} {
		resp, err := client.Get(url)
		if err != nil {
			panic(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Retry-After"))))
	}
	for _, r := range srv.Requests() {
		line := fmt.Sprint(r.Seq, " ", r.Method, " ", r.Route, " ", r.Status, " ", strings.Join(r.QueryKeys, ","), " ", r.Fault)
		fmt.Println(strings.TrimSpace(line))
	}
	// Output:
	// 200
	// 429 Sunday, 06-Nov-94 08:49:42 GMT
	// 1 GET file.list 200 limit
	// 2 GET file.list 429 after,limit,sig 429 retry-after=rfc850(+2s)
}

// The same rules from a JSON script, as the command's --script reads them.
func ExampleLoadScript() {
	script, err := fakeserver.LoadScript(strings.NewReader(`{
	  "rules": [
	    {"route": "search.put", "times": 1, "fault": "throttle",
	     "retry_after": {"form": "seconds", "seconds": 1}},
	    {"route": "file.upload", "fault": "throttle", "retry_after": {"form": "serconds"}}
	  ]
	}`))
	fmt.Println(script, err)
	// Output:
	// <nil> script: rules[1].retry_after.form (line 5, column 6): unknown Retry-After form "serconds" (want one of seconds, imf-fixdate, rfc850, asctime, raw, duplicate, missing, oversized, overlong, remaining, remaining-ms)
}

// A queue-429 on the first upload, then the check a test makes: the one
// re-send of the queue route is allowed, no other mutation repeats.
func ExampleServer_AssertNoMutationSentTwice() {
	srv := fakeserver.New()
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Times(1))
	client := &http.Client{Transport: srv.Transport()}
	for range 2 { // the upload and its one re-send
		resp, err := client.Post("http://files.test/files", "text/plain", strings.NewReader("row 1"))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	fmt.Println(srv.AssertNoMutationSentTwice(printTB{}, fakeserver.AllowResend(fakeserver.RouteFileUpload, 1)))
	fmt.Println(srv.AssertNoMutationSentTwice(printTB{}))
	// Output:
	// 429
	// 201
	// true
	// fakeserver: mutation POST "/files" (file.upload, body sha256:96e3051150089bfa9f3564e2a94c62ed4e956174403606a91477120d2ed06895) sent 2 times, at most 1 allowed: requests [1 2]
	// false
}

// printTB prints assertion failures.
type printTB struct{}

func (printTB) Helper() {}
func (printTB) Errorf(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

// A token bucket of 2 tokens refilled at 4 a second on one storage
// account, as Azure throttles: two GETs pass, the third gets a 429 whose
// Retry-After is the time to the next token rounded up to whole seconds,
// and retry-after-ms the same in milliseconds; 250 ms later a token is
// back. The ledger keeps each decision.
func ExampleTokenBucket() {
	now := time.Date(2026, time.December, 1, 10, 0, 0, 0, time.UTC)
	srv := fakeserver.New(fakeserver.WithClock(func() time.Time { return now }))
	defer srv.Close()
	srv.PutBlob("checkpoints", "a.json", []byte(`{}`))
	srv.Script().Add(fakeserver.RouteBlobGet,
		fakeserver.Throttle(fakeserver.RetryAfterRemainingMs()), fakeserver.TokenBucket(4, 2))

	client := &http.Client{Transport: srv.Transport()}
	for _, after := range []time.Duration{0, 0, 0, 100 * time.Millisecond, 150 * time.Millisecond} {
		now = now.Add(after)
		resp, err := client.Get("http://127.0.0.1:10000/devstoreaccount1/checkpoints/a.json")
		if err != nil {
			panic(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Retry-After"), " ", resp.Header.Get("retry-after-ms"))))
	}
	for _, r := range srv.Requests() {
		fmt.Println(r.Decisions[0])
	}
	// Output:
	// 200
	// 200
	// 429 1 250
	// 429 1 150
	// 200
	// rule 0 token_bucket account=devstoreaccount1 tokens_left=1 passed
	// rule 0 token_bucket account=devstoreaccount1 tokens_left=0 passed
	// rule 0 token_bucket account=devstoreaccount1 tokens_left=0 fired wait=250ms
	// rule 0 token_bucket account=devstoreaccount1 tokens_left=0 fired wait=150ms
	// rule 0 token_bucket account=devstoreaccount1 tokens_left=0 passed
}

// Azure Storage's answer when an account is over its request rate: 503
// ServerBusy with its XML error body and no Retry-After, here for every
// request of a 2 s burst.
func ExampleServerBusy() {
	now := time.Date(2026, time.December, 1, 10, 0, 0, 0, time.UTC)
	srv := fakeserver.New(fakeserver.WithClock(func() time.Time { return now }))
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteAny, fakeserver.ServerBusy(), fakeserver.Window(now, 2*time.Second))

	client := &http.Client{Transport: srv.Transport()}
	resp, err := client.Get("http://fake.test/devstoreaccount1/checkpoints/a.json")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("x-ms-request-id")
	fmt.Println(resp.StatusCode, resp.Header.Get("x-ms-error-code"), len(resp.Header.Values("Retry-After")))
	fmt.Println(strings.ReplaceAll(string(body), id, "{request-id}"))
	// Output:
	// 503 ServerBusy 0
	// <?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>Operations per second is over the account limit.
	// RequestId:{request-id}
	// Time:2026-12-01T10:00:00.0000000Z</Message></Error>
}
