package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
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

// BenchmarkNextGrowth measures what R112 bounds: Next plus one upload's
// records (Begin, Complete with its receipt) by one worker on a run of
// 10,000 planned files WithParallel(16) in a local directory (real fsyncs),
// at the start of the run and after 5,000 uploads spread over the shards
// (as many workers leave them). Its cost must not grow with the run's
// records. The 5,000 uploads are made first, through the same calls
// without fsyncs, and each measurement works on a copy (outside the timer).
// nofsync measures the same without fsyncs: the journal's own work, apart
// from this machine's disk, whose fsyncs vary from run to run.
//
//	go test -run '^$' -bench BenchmarkNextGrowth -benchmem -count 5 ./journal/
func BenchmarkNextGrowth(b *testing.B) {
	plan := manyFiles(10_000)
	made := filepath.Join(b.TempDir(), "run")
	j, err := Open(made, WithPlan(plan), WithParallel(16), withFS(noSyncFS{}))
	if err != nil {
		b.Fatal(err)
	}
	for _, uploads := range []int{0, 5_000} {
		for range uploads - j.Status(t0).Files[FileAcked] {
			j.nx.last = 0 // no lane first: each upload goes to the shard with most files left
			nextUpload(b, j)
		}
		for _, fsy := range []struct {
			name string
			fs   fsys.FS
		}{{"fsync", fsys.OS{}}, {"nofsync", noSyncFS{}}} {
			b.Run(fmt.Sprintf("uploads=%d/%s", uploads, fsy.name), func(b *testing.B) {
				dir := filepath.Join(b.TempDir(), "run")
				copyRun(b, made, dir)
				j, err := Open(dir, WithPlan(plan), withFS(fsy.fs))
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					nextUpload(b, j)
				}
			})
		}
	}
}

// copyRun copies the run directory from to the new directory to, private.
func copyRun(b *testing.B, from, to string) {
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.Mkdir(filepath.Join(to, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// nextUpload takes the next file and records its upload's 201.
func nextUpload(b *testing.B, j *Journal) {
	f, err := j.Next(context.Background(), NewApproval)
	if err != nil {
		b.Fatal(err)
	}
	ctx, req := WithUpload(context.Background(), f.ID), putReq(b)
	if err := j.Begin(ctx, req); err != nil {
		b.Fatal(err)
	}
	if err := j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201}); err != nil {
		b.Fatal(err)
	}
}

// noSyncFS is the real file system without fsyncs, to prepare runs fast.
type noSyncFS struct{ fsys.OS }

func (noSyncFS) SyncDir(string) error { return nil }

func (n noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	f, err := n.OS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ fsys.File }

func (noSyncFile) Sync() error { return nil }
