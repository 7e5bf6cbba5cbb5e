package fakeserver

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// steppingClock advances one second per reading.
func steppingClock() (Option, *sync.Mutex) {
	var mu sync.Mutex
	now := t0
	return WithClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}), &mu
}

func TestLedger(t *testing.T) {
	clock, _ := steppingClock()
	var observed []Request
	var omu sync.Mutex
	s := newServer(t, clock, WithObserver(func(r Request) {
		omu.Lock()
		observed = append(observed, r)
		omu.Unlock()
	}))
	s.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(1)), Nth(2))
	c := newClient(t, s.Transport())

	do(t, c, "POST", "http://fake.test/files?sv=2024&sig=SECRET&sp=rw", []byte("one"))
	do(t, c, "GET", "http://fake.test/files?limit=1&sig=SECRET", nil)
	do(t, c, "GET", "http://fake.test/files?limit=1&limit=2&sig=SECRET", nil)
	do(t, c, "PUT", "http://fake.test/c/b%20x?se=2030&skoid=abc&sig=SECRET%3D", []byte("blob"))

	reqs := s.Requests()
	require.Len(t, reqs, 4)
	assert.Equal(t, []int{1, 2, 3, 4}, []int{reqs[0].Seq, reqs[1].Seq, reqs[2].Seq, reqs[3].Seq})
	assert.Equal(t, []int{1, 1, 2, 1}, []int{reqs[0].Ordinal, reqs[1].Ordinal, reqs[2].Ordinal, reqs[3].Ordinal})
	assert.Equal(t, []string{"file.upload", "file.list", "file.list", "blob.put"}, routesOf(reqs))
	assert.Equal(t, []int{201, 200, 429, 201}, []int{reqs[0].Status, reqs[1].Status, reqs[2].Status, reqs[3].Status})
	assert.Equal(t, "/c/b x", reqs[3].Path, "the decoded path")
	assert.Equal(t, []string{"sig", "sp", "sv"}, reqs[0].QueryKeys)
	assert.Equal(t, []string{"limit", "sig"}, reqs[2].QueryKeys)
	assert.Equal(t, []string{"se", "sig", "skoid"}, reqs[3].QueryKeys)
	assert.Equal(t, sha([]byte("one")), reqs[0].BodyDigest)
	assert.Equal(t, int64(3), reqs[0].BodySize)
	assert.Equal(t, sha(nil), reqs[1].BodyDigest, "an empty body has the empty digest")
	assert.Equal(t, "429 retry-after=seconds(1)", reqs[2].Fault)
	for i, r := range reqs {
		assert.Equal(t, t0.Add(time.Duration(i+1)*time.Second), r.Arrived, "arrival on the server clock")
	}
	assert.NotContains(t, fmt.Sprintf("%#v", reqs), "SECRET", "no query value is kept")

	assert.Equal(t, 2, s.Count(RouteFileList, "GET"))
	assert.Equal(t, 2, s.Count(RouteFileList, ""))
	assert.Equal(t, 0, s.Count(RouteFileList, "POST"))
	assert.Equal(t, 4, s.Count("", ""))
	assert.Equal(t, 2, s.Count(RouteAny, "get"))

	omu.Lock()
	defer omu.Unlock()
	assert.Equal(t, reqs, observed, "the observer saw every final entry")

	// Requests returns a copy.
	reqs[0].QueryKeys[0] = "changed"
	assert.Equal(t, "sig", s.Requests()[0].QueryKeys[0])
}

func TestQueryKeys(t *testing.T) {
	assert.Nil(t, queryKeys(""))
	assert.Equal(t, []string{"a", "b c", "sig"}, queryKeys("sig=x&b%20c=1&a&&a=2"))
	assert.Equal(t, []string{"%zz"}, queryKeys("%zz=1"))
}

func TestAssertNoMutationSentTwice(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Transport())
	do(t, c, "POST", "http://fake.test/files", []byte("a"))
	do(t, c, "POST", "http://fake.test/files", []byte("b"))
	do(t, c, "GET", "http://fake.test/files", nil)
	do(t, c, "GET", "http://fake.test/files", nil)
	do(t, c, "PUT", "http://fake.test/indexes/x", []byte(`{}`))
	do(t, c, "PUT", "http://fake.test/indexes/x", []byte(`{"fields":[]}`))

	var rec recTB
	assert.True(t, s.AssertNoMutationSentTwice(&rec), "GETs and distinct bodies are fine")
	assert.Empty(t, rec.errs)

	do(t, c, "POST", "http://fake.test/files", []byte("a"))
	assert.False(t, s.AssertNoMutationSentTwice(&rec))
	require.Len(t, rec.errs, 1)
	assert.Contains(t, rec.errs[0], `mutation POST "/files" (file.upload, body `+sha([]byte("a"))+`) sent 2 times, at most 1 allowed: requests [1 7]`)

	rec = recTB{}
	assert.True(t, s.AssertNoMutationSentTwice(&rec, AllowResend(RouteFileUpload, 1)), "the queue route's one re-send")
	assert.Empty(t, rec.errs)
	assert.False(t, s.AssertNoMutationSentTwice(&rec, AllowResend(RouteSearchPut, 1)), "the allowance is per route")

	do(t, c, "POST", "http://fake.test/files", []byte("a"))
	rec = recTB{}
	assert.False(t, s.AssertNoMutationSentTwice(&rec, AllowResend(RouteFileUpload, 1)), "only one re-send")
	assert.Len(t, rec.errs, 1)

	do(t, c, "PUT", "http://fake.test/indexes/x", []byte(`{}`))
	rec = recTB{}
	s.AssertNoMutationSentTwice(&rec, nil)
	assert.Len(t, rec.errs, 2, "one error per repeated mutation")
}

func TestAssertGap(t *testing.T) {
	clock, _ := steppingClock() // one second between arrivals
	s := newServer(t, clock)
	s.Script().Add(RouteSearchPut, Throttle(RetryAfterSeconds(1)), Nth(1))
	s.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(1)), Nth(2))
	c := newClient(t, s.Transport())
	do(t, c, "PUT", "http://fake.test/indexes/x", []byte(`{}`)) // 429
	do(t, c, "GET", "http://fake.test/indexes/x", nil)          // readback, 1 s later
	do(t, c, "GET", "http://fake.test/files", nil)
	do(t, c, "GET", "http://fake.test/files", nil) // 429
	do(t, c, "GET", "http://fake.test/files", nil)

	var rec recTB
	assert.True(t, s.AssertGap(&rec, RouteSearchPut, 1, time.Second), "write 429, then the readback")
	assert.True(t, s.AssertGap(&rec, RouteFileList, 2, time.Second))
	assert.True(t, s.AssertGap(&rec, RouteAny, 4, time.Second))
	assert.Empty(t, rec.errs)

	gap, err := s.Gap(RouteFileList, 2)
	assert.NoError(t, err)
	assert.Equal(t, time.Second, gap)

	assert.False(t, s.AssertGap(&rec, RouteFileList, 2, 2*time.Second))
	assert.False(t, s.AssertGap(&rec, RouteFileList, 1, 0), "not a 429")
	assert.False(t, s.AssertGap(&rec, RouteFileList, 3, 0), "nothing after it")
	assert.False(t, s.AssertGap(&rec, RouteFileList, 9, 0), "no such request")
	require.Len(t, rec.errs, 4)
	assert.Contains(t, rec.errs[0], "came 1s after it, want at least 2s")
	assert.Contains(t, rec.errs[1], "answered 200, not 429")
	assert.Contains(t, rec.errs[2], "no request arrived after file.list #3")
	assert.Contains(t, rec.errs[3], "no request file.list #9")
}

// TestLedgerConcurrent: many clients at once; the ledger stays consistent.
func TestLedgerConcurrent(t *testing.T) {
	s := newServer(t)
	s.Script().Add(RouteFileUpload, Throttle(RetryAfterSeconds(1)), Times(10))
	c := newClient(t, s.Transport())
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			resp, err := c.Post("http://fake.test/files", "text/plain", strings.NewReader(fmt.Sprint(i)))
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	reqs := s.Requests()
	assert.Len(t, reqs, 50)
	throttled := 0
	for i, r := range reqs {
		assert.Equal(t, i+1, r.Seq)
		assert.Equal(t, i+1, r.Ordinal)
		if r.Status == 429 {
			throttled++
		}
	}
	assert.Equal(t, 10, throttled)
	assert.Len(t, s.Files(), 40)
	assert.True(t, s.AssertNoMutationSentTwice(t))
}
