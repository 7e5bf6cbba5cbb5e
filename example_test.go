package readrecovery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/readrecovery/readrecovery"
)

// A Search index PUT meets 429: the transport hands the 429 back untouched
// (never re-sending the PUT) and makes the readback GET of the same sequence
// wait the server's Retry-After before it is sent.
func ExampleNew_readbackAfterWrite429() {
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			puts.Add(1)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("x-ms-request-id", "put-1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("x-ms-request-id", "get-1")
		io.WriteString(w, `{"name":"hotels"}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: readrecovery.New(nil)}
	b := readrecovery.NewBudget("index hotels")
	ctx := readrecovery.WithBudget(context.Background(), b)

	put, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/indexes/hotels", strings.NewReader(`{"name":"hotels"}`))
	resp, _ := client.Do(put)
	resp.Body.Close()
	fmt.Println("PUT:", resp.StatusCode)

	get, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/indexes/hotels", nil)
	resp, _ = client.Do(get) // waits 1 s first
	resp.Body.Close()
	fmt.Println("GET:", resp.StatusCode)

	r := b.Report()
	fmt.Println("PUTs sent:", puts.Load())
	fmt.Println("wait:", r.WaitLog[0].Trigger, r.WaitLog[0].RetryAfter.Kind, r.WaitLog[0].RetryAfter.Value)
	fmt.Println("ownership:", r.Ownership)
	// Output:
	// PUT: 429
	// GET: 200
	// PUTs sent: 1
	// wait: write-429 seconds 1
	// ownership: observed
}

// Every page of a File inventory shares one Budget: the first 429 is waited
// and its GET re-sent once; a second 429 stops the sequence, and the pages
// after it fail before any network access.
func ExampleWithBudget_inventory() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 2, 4: // the first send of page 2, then page 3
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			io.WriteString(w, `{"value":[]}`)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: readrecovery.New(nil)}
	b := readrecovery.NewBudget("file inventory")
	ctx := readrecovery.WithBudget(context.Background(), b)
	for page := 1; page <= 4; page++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/files?page=%d", srv.URL, page), nil)
		resp, err := client.Do(req)
		var stop *readrecovery.StopError
		if errors.As(err, &stop) {
			fmt.Printf("page %d: stopped: %s\n", page, stop.Reason)
			continue
		} else if err != nil {
			fmt.Printf("page %d: %v\n", page, err)
			continue
		}
		resp.Body.Close()
		fmt.Printf("page %d: %d\n", page, resp.StatusCode)
	}
	r := b.Report()
	fmt.Println("requests:", r.Requests, "waits:", r.Waits, "stop:", r.Stop)
	// Output:
	// page 1: 200
	// page 2: 200
	// page 3: 429
	// page 4: stopped: opportunity-used
	// requests: 4 waits: 1 stop: opportunity-used
}

// NewClient wires the transport into an http.Client over a pooled
// go-cleanhttp transport, and returns redirects instead of following them.
func ExampleNewClient() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()

	client := readrecovery.NewClient()
	resp, err := client.Get(srv.URL + "/indexes/hotels")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Location"))
	// Output:
	// 307 https://elsewhere.example/
}
