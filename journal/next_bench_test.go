package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// BenchmarkNext measures R86's target: workers that only loop on Next
// on a run WithParallel(4) in a local directory (real fsyncs), each file
// uploaded through readrecovery with the Journal to a loopback server that
// answers every PUT 201 after 20 ms. workers=1 is one worker; workers=4
// are four Journals of the run (as four processes); shared=4 is one
// Journal used by four goroutines. files/s is the run's rate, from the
// first Next to the last worker's ErrNoMoreFiles; a new run of 400 files
// is made outside the timer whenever one is done.
//
//	go test -run '^$' -bench BenchmarkNext -benchtime 400x ./journal/
func BenchmarkNext(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	rt := readrecovery.New(srv.Client().Transport)
	for _, tc := range []struct {
		name    string
		workers int
		shared  bool
	}{{"workers=1", 1, false}, {"workers=4", 4, false}, {"shared=4", 4, true}} {
		b.Run(tc.name, func(b *testing.B) {
			const perRun = 400
			var busy time.Duration
			for done := 0; done < b.N; {
				n := min(perRun, b.N-done)
				plan := manyFiles(n)
				dir := filepath.Join(b.TempDir(), "run")
				js := make([]*Journal, tc.workers)
				for w := range js {
					if tc.shared && w > 0 {
						js[w] = js[0]
						continue
					}
					j, err := Open(dir, WithPlan(plan), WithParallel(4))
					if err != nil {
						b.Fatal(err)
					}
					js[w] = j
				}
				start := time.Now()
				errs := make(chan error, tc.workers)
				for _, j := range js {
					go func() {
						for {
							f, err := j.Next(context.Background(), NewApproval)
							if err != nil {
								if errors.Is(err, ErrNoMoreFiles) {
									err = nil
								}
								errs <- err
								return
							}
							if out := benchUpload(rt, j, srv.URL, f.ID); out != "acked" {
								errs <- fmt.Errorf("%s: %s", f.ID, out)
								return
							}
						}
					}()
				}
				for range js {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				busy += time.Since(start)
				done += n
			}
			b.ReportMetric(float64(b.N)/busy.Seconds(), "files/s")
		})
	}
}

// benchUpload is uploadOne against the server at base.
func benchUpload(rt http.RoundTripper, j *Journal, base, id string) string {
	b := readrecovery.NewBudget("up-" + id)
	ctx := WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/files/"+id, strings.NewReader("content of "+id))
	if err != nil {
		return err.Error()
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return resp.Status
	}
	return "acked"
}
