package readrecovery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// budget-in-context: 500 sequences at once over one transport, each meeting 429s, each
// taking at most one wait; the server's ledger shows no sequence re-sent
// more than once and nothing sent after a stop; no goroutine is left.
func TestFiveHundredConcurrentSequences(t *testing.T) {
	defer goleak.VerifyNone(t)
	const sequences, pages = 500, 4
	var mu sync.Mutex
	seen := map[string][]string{} // sequence → the pages it sent, in order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, page := r.URL.Query().Get("seq"), r.URL.Query().Get("page")
		mu.Lock()
		seen[seq] = append(seen[seq], page)
		n := len(seen[seq])
		mu.Unlock()
		// Every sequence meets 429 on its 2nd request; odd sequences meet
		// another on their 4th (which must stop them).
		s, _ := strconv.Atoi(seq)
		if n == 2 || (s%2 == 1 && n == 4) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	tr := New(nil)
	client := &http.Client{Transport: tr}
	budgets := make([]*Budget, sequences)
	var wg sync.WaitGroup
	for i := range sequences {
		budgets[i] = NewBudget(fmt.Sprintf("seq-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := WithBudget(context.Background(), budgets[i])
			for p := 1; p <= pages; p++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/files?seq=%d&page=%d", srv.URL, i, p), nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				drain(resp)
			}
		}()
	}
	wg.Wait()
	for i, b := range budgets {
		r := b.Report()
		require.LessOrEqual(t, r.Waits, 1)
		assert.Equal(t, 1, r.Waits, "sequence %d", i)
		got := seen[strconv.Itoa(i)]
		if i%2 == 0 {
			// page 2 re-sent once; pages 3 and 4 normal.
			assert.Equal(t, []string{"1", "2", "2", "3", "4"}, got, "sequence %d", i)
			assert.Equal(t, StopReason(""), r.Stop)
			assert.Equal(t, 5, r.Requests)
		} else {
			// page 3's 429 (4th request) stops; page 4 is never sent.
			assert.Equal(t, []string{"1", "2", "2", "3"}, got, "sequence %d", i)
			assert.Equal(t, StopOpportunityUsed, r.Stop)
			assert.Equal(t, 4, r.Requests)
		}
	}
	tr.CloseIdleConnections()
	srv.Close()
}

// A finished sequence its caller dropped is freed at once: the deadline
// timer does not keep the budget (and its evidence) alive for the rest of
// its 60 s total.
func TestFinishedBudgetIsCollected(t *testing.T) {
	srv := newScript(sequenceOf(reply(200, "x-ms-request-id", "r")))
	tr := New(srv)
	wb := func() weak.Pointer[Budget] {
		b := NewBudget("short")
		resp, err := tr.RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
		require.NoError(t, err)
		drain(resp)
		resp.Request = nil // the scripted server keeps the request on the response
		require.Equal(t, 1, b.Report().Requests)
		return weak.Make(b)
	}()
	for i := 0; i < 5 && wb.Value() != nil; i++ {
		runtime.GC()
	}
	assert.Nil(t, wb.Value(), "the budget outlived its last reference")
}
