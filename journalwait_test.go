package readrecovery_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// blockingStore is a journal Store in memory whose lists and reads, once
// block is set, wait until their context ends: a store that stops
// answering while the journal waits.
type blockingStore struct {
	mu    sync.Mutex
	objs  map[string][]byte
	block atomic.Bool
}

func (s *blockingStore) wait(ctx context.Context) error {
	if s.block.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *blockingStore) Create(_ context.Context, name string, data []byte) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[name]; ok {
		return "", fs.ErrExist
	}
	s.objs[name] = append([]byte(nil), data...)
	return "", nil
}

func (s *blockingStore) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	if err := s.wait(ctx); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.objs[name]
	if !ok {
		return nil, "", fs.ErrNotExist
	}
	return append([]byte(nil), d...), "", nil
}

func (s *blockingStore) List(ctx context.Context, limit int) ([]string, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.objs {
		out = append(out, n)
	}
	return out, nil
}

func (s *blockingStore) Remove(_ context.Context, name, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, name)
	return nil
}

// Hold and Live: every marker of this store is its creator's while it
// exists (the test's workers never die).
func (s *blockingStore) Hold(context.Context, string, string) (func(), error) { return func() {}, nil }

func (s *blockingStore) Live(ctx context.Context, name string) (bool, string, error) {
	if err := s.wait(ctx); err != nil {
		return false, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[name]; !ok {
		return false, "", fs.ErrNotExist
	}
	return true, "", nil
}

// The stop is visible (issue 28): a Budget's total that runs out while the
// journal waits ends the request with a total-exhausted stop that matches
// ErrSequenceStopped, whatever the wait: another worker's marker of a run
// shared WithPendingWait (Admit's wait), the marker of the file's shard in
// a parallel run (Begin's wait), or a store that stops answering a list
// (the journal's read cut short by the total: no journal-restricted stop,
// no persistence failure). Nothing reaches the server, and the stop comes
// at the total.
func TestJournalWaitEndsAtTheTotal(t *testing.T) {
	const total = 300 * time.Millisecond
	plan := []journal.PlannedFile{{ID: "a.csv"}, {ID: "b.csv"}, {ID: "c.csv"}, {ID: "d.csv"}}
	// The Journals whose requests are held stay reachable to the end: a
	// Journal collected with its request in flight closes the marker's
	// lock, as a dead worker would (R83).
	var holders []*journal.Journal
	defer runtime.KeepAlive(&holders)
	held := func(t *testing.T, j *journal.Journal, id string) {
		t.Helper()
		holders = append(holders, j)
		ctx := journal.WithUpload(context.Background(), id)
		if err := j.Begin(ctx, readrecovery.JournalRequest{Method: http.MethodPost, URLDigest: journal.PlannedFile{ID: "u"}.Digest(), Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// setup returns the Journal of the upload of the file it returns.
		setup func(t *testing.T) (*journal.Journal, string)
	}{
		{"Admit waits for another worker's marker", func(t *testing.T) (*journal.Journal, string) {
			dir := filepath.Join(t.TempDir(), "run")
			other, err := journal.Open(dir, journal.WithPlan(plan), journal.WithPendingWait(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			held(t, other, "a.csv")
			j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithPendingWait(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return j, "b.csv"
		}},
		{"Begin waits for its shard's marker", func(t *testing.T) (*journal.Journal, string) {
			dir := filepath.Join(t.TempDir(), "run")
			other, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
			if err != nil {
				t.Fatal(err)
			}
			held(t, other, "a.csv")
			for _, f := range plan[1:] {
				if other.Shard(f.ID) == other.Shard("a.csv") {
					j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
					if err != nil {
						t.Fatal(err)
					}
					return j, f.ID
				}
			}
			t.Fatal("no file shares a.csv's shard")
			return nil, ""
		}},
		{"the store stops answering", func(t *testing.T) (*journal.Journal, string) {
			st := &blockingStore{objs: map[string][]byte{}}
			j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(plan))
			if err != nil {
				t.Fatal(err)
			}
			st.block.Store(true)
			return j, "b.csv"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, id := tc.setup(t)
			srv := fakeserver.New()
			defer srv.Close()
			b := readrecovery.NewBudget("upload "+id, readrecovery.MaxTotal(total))
			ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), id)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://files.example/files", bytes.NewReader([]byte("content of "+id)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = readrecovery.New(srv.Transport()).RoundTrip(req)
			took := time.Since(start)
			var se *readrecovery.StopError
			if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) || se.Reason != readrecovery.StopTotalExhausted {
				t.Fatalf("err = %v (%T), want a total-exhausted stop", err, err)
			}
			if rep := b.Report(); rep.Stop != readrecovery.StopTotalExhausted || rep.Requests != 0 {
				t.Errorf("report: stop %q, %d requests; want total-exhausted, 0", rep.Stop, rep.Requests)
			}
			if took < total || took > total+2*time.Second {
				t.Errorf("stopped after %v, the total is %v", took, total)
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("the server saw %d requests, want 0", n)
			}
		})
	}
}
