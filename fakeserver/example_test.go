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
	// <nil> script: rules[1].retry_after.form (line 5): unknown Retry-After form "serconds" (want one of seconds, imf-fixdate, rfc850, asctime, raw, duplicate, missing, oversized, overlong, remaining, remaining-ms)
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
