package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/require"
)

// memStore is an in-memory Store with versions, as Blob Storage keeps
// them: every create makes a new version; Remove matches it. fail, when
// set, fails the operations it returns an error for, changing nothing.
type memStore struct {
	mu    sync.Mutex
	objs  map[string][]byte
	vers  map[string]string
	n     int
	ops   []string
	fail  func(op, name string) error
	reads int
	// delay, when set, is slept before every operation (outside the
	// lock): a store across a network.
	delay time.Duration
	// held is the version of each name a live worker holds (Hold), as a
	// lease that ends only with its release (the tests' kill).
	held map[string]string
}

func newMemStore() *memStore {
	return &memStore{objs: map[string][]byte{}, vers: map[string]string{}}
}

var _ Store = (*memStore)(nil)

func (m *memStore) check(op, name string) error {
	m.ops = append(m.ops, op+" "+name)
	if m.fail != nil {
		return m.fail(op, name)
	}
	return nil
}

func (m *memStore) Create(_ context.Context, name string, data []byte) (string, error) {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("create", name); err != nil {
		return "", err
	}
	if _, ok := m.objs[name]; ok {
		return "", fmt.Errorf("mem: %s: %w", name, fs.ErrExist)
	}
	m.n++
	m.objs[name], m.vers[name] = append([]byte(nil), data...), fmt.Sprintf(`"v%d"`, m.n)
	if strings.HasSuffix(name, record.MarkerName) {
		// Live from its creation, as Store.Live requires (Blob Storage:
		// its creation grace), until its Hold's release.
		if m.held == nil {
			m.held = map[string]string{}
		}
		m.held[name] = m.vers[name]
	}
	return m.vers[name], nil
}

func (m *memStore) Read(_ context.Context, name string, limit int64) ([]byte, string, error) {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if err := m.check("read", name); err != nil {
		return nil, "", err
	}
	d, ok := m.objs[name]
	if !ok {
		return nil, "", fmt.Errorf("mem: %s: %w", name, fs.ErrNotExist)
	}
	if int64(len(d)) > limit+1 {
		d = d[:limit+1]
	}
	return append([]byte(nil), d...), m.vers[name], nil
}

func (m *memStore) List(_ context.Context, limit int) ([]string, error) {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list", ""); err != nil {
		return nil, err
	}
	var out []string
	for n := range m.objs {
		if len(out) < limit {
			out = append(out, n)
		}
	}
	return out, nil
}

func (m *memStore) Remove(_ context.Context, name, version string) error {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("remove", name); err != nil {
		return err
	}
	if m.vers[name] != version {
		return fmt.Errorf("mem: %s: version %s, not %s (412)", name, m.vers[name], version)
	}
	delete(m.objs, name)
	delete(m.vers, name)
	return nil
}

// Hold holds name at version until release (a lease that never expires
// while its worker lives); not logged in ops, but fail applies.
func (m *memStore) Hold(_ context.Context, name, version string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail("hold", name); err != nil {
			return nil, err
		}
	}
	if m.vers[name] != version || m.held[name] != version {
		return nil, fmt.Errorf("mem: hold %s: version %s, not %s", name, m.vers[name], version)
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.held[name] == version {
			delete(m.held, name)
		}
	}, nil
}

// Live reports whether name is held at its current version.
func (m *memStore) Live(_ context.Context, name string) (bool, string, error) {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vers[name]
	if !ok {
		return false, "", fmt.Errorf("mem: %s: %w", name, fs.ErrNotExist)
	}
	return m.held[name] == v, v, nil
}

func (m *memStore) has(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.objs[name]
	return ok
}

func openMem(t *testing.T, st Store, now time.Time, opts ...Option) *Journal {
	t.Helper()
	j, err := OpenStore(context.Background(), st, append([]Option{withClock(newFakeClock(now)), WithPlan(plan3)}, opts...)...)
	require.NoError(t, err)
	return j
}

// A restriction recorded by one worker blocks another worker of the same
// store before network access, and the records are the directory's bytes.
func TestOpenStoreSharedRun(t *testing.T) {
	st := newMemStore()
	a := openMem(t, st, t0)
	b := openMem(t, st, t0)
	require.NoError(t, b.Admit(context.Background(), t0))

	record429(t, a, upload, putReq(t), secs(60), timing(t0, 60))
	require.True(t, st.has("backoff-0001.json"))
	require.False(t, st.has(record.MarkerName), "the marker is removed with its version")

	err := b.Admit(context.Background(), t0.Add(time.Second))
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, Waiting, re.Status.State)
	require.Equal(t, t0.Unix()+60, re.Status.NotBeforeUTC)
	require.Equal(t, Elapsed, b.Status(t0.Add(60*time.Second)).State)

	// The same records in a directory: byte for byte what a directory run
	// holds is what the store holds (one format).
	sum, err := InspectStore(context.Background(), st)
	require.NoError(t, err)
	require.Equal(t, Summary{Entries: 1, PlannedFiles: 3}, sum)
}

// The marker serializes two workers: B's claim meets A's marker and, with
// WithPendingWait, waits for it; a marker that stays (a dead worker) leaves
// the run unresolved for B after the wait.
func TestOpenStorePendingWait(t *testing.T) {
	st := newMemStore()
	a := openMem(t, st, t0)
	// B on the real clock: its wait sleeps for real (at most ~300 ms).
	b, err := OpenStore(context.Background(), st, WithPlan(plan3), WithPendingWait(300*time.Millisecond))
	require.NoError(t, err)

	require.NoError(t, a.Begin(upload, putReq(t)))
	done := make(chan error, 1)
	go func() { done <- b.Admit(context.Background(), time.Now()) }()
	time.Sleep(60 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Admit returned %v while A's marker was there", err)
	default:
	}
	require.NoError(t, a.Complete(upload, putReq(t), readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r1"}))
	require.NoError(t, <-done, "B admitted once A's marker went")

	// A dies holding the marker: B waits 300 ms for it, then unresolved.
	require.NoError(t, a.Begin(WithUpload(context.Background(), "b.bin"), putReq(t)))
	start := time.Now()
	err = b.Begin(WithUpload(context.Background(), "c.bin"), putReq(t))
	require.ErrorIs(t, err, ErrPending)
	require.ErrorIs(t, err, ErrRestricted)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.Equal(t, Unresolved, b.Status(time.Now()).State)

	// The caller's context ends the wait: its error, not a restriction.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = b.Admit(ctx, time.Now())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrRestricted)
}

// Every failed write of the store is a persistence failure (persistence-failure-is-terminal, shared-runs): the
// marker's create refuses the request with an error that is no
// restriction; an entry that cannot be created leaves the marker, and the
// run is unresolved for every worker, never clear.
func TestOpenStoreWriteFailures(t *testing.T) {
	storeErr := errors.New("store: status 429 (request ID rid-429)")
	for _, tc := range []struct {
		name    string
		failOn  string
		step    string // "begin" or "backoff"
		wantRun State
	}{
		{"marker create", "create " + record.MarkerName, "begin", Clear},
		{"entry create", "create backoff-0001.json", "backoff", Unresolved},
		{"marker remove", "remove " + record.MarkerName, "backoff", Elapsed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			j := openMem(t, st, t0)
			st.fail = func(op, name string) error {
				if op+" "+name == tc.failOn {
					return storeErr
				}
				return nil
			}
			err := j.Begin(upload, putReq(t))
			if tc.step == "begin" {
				require.ErrorIs(t, err, storeErr)
				var re *RestrictedError
				require.False(t, errors.As(err, &re), "a failed write is no restriction: %v", err)
				require.Contains(t, err.Error(), "rid-429")
			} else {
				require.NoError(t, err)
				_, err = j.Backoff(upload, putReq(t), out429("r"), secs(5), timing(t0, 5))
				require.ErrorIs(t, err, storeErr)
			}
			require.Equal(t, Unresolved, j.Status(t0.Add(time.Hour)).State)
			st.fail = nil
			other := openMem(t, st, t0.Add(time.Hour))
			got := other.Status(t0.Add(time.Hour))
			if tc.wantRun == Elapsed {
				// The entry is there; the marker stays too: unresolved.
				require.True(t, st.has("backoff-0001.json"))
				require.Equal(t, Unresolved, got.State)
				return
			}
			require.Equal(t, tc.wantRun, got.State, got.Reason)
		})
	}
}

// OpenStore of a DirStore is Open of the directory: the same run.
func TestOpenStoreDirStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	a, err := OpenStore(context.Background(), DirStore(dir), withClock(newFakeClock(t0)), WithPlan(plan3))
	require.NoError(t, err)
	require.Equal(t, dir, a.Dir())
	record429(t, a, upload, putReq(t), secs(60), timing(t0, 60))
	require.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, dir))
	b := reopen(t, dir, t0.Add(time.Second))
	require.Equal(t, Waiting, b.Status(t0.Add(time.Second)).State)
}

// FuzzStoreRun loads a store-backed run (the path of the Blob store: names
// from a listing, content from Read) in which one object, of any name, has
// any content: never a panic, and the waiting run is never clear or
// elapsed (crash-never-loses-restriction).
func FuzzStoreRun(f *testing.F) {
	base, now := fuzzBase(f)
	f.Add("backoff-0001.json", base["run/backoff-0001.json"].Data)
	f.Add("backoff-0002.json", validSecond(f, base))
	f.Add("run.json", []byte("{}"))
	f.Add("pending-request.json", []byte(""))
	f.Add("receipt-"+strings.Repeat("0", 32)+".json", []byte("{}\n"))
	f.Add("dir/backoff-0002.json", []byte("x"))
	f.Add("", []byte("x"))
	f.Add("plan.json", []byte(strings.Repeat("a", record.MaxPlanBytes+10)))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		st := newMemStore()
		for k, v := range base {
			if n, ok := strings.CutPrefix(k, "run/"); ok {
				st.objs[n], st.vers[n] = v.Data, `"base"`
			}
		}
		st.objs[name], st.vers[name] = data, `"fuzz"`
		j, err := OpenStore(context.Background(), st, Existing(), withClock(newFakeClock(now)))
		if err != nil {
			t.Fatalf("OpenExistingStore: %v", err)
		}
		if s := j.Status(now); s.State == Clear || s.State == Elapsed {
			t.Fatalf("%q = %q: %+v", name, data, s)
		}
	})
}

// DirStore's Store methods are the directory's: an exclusive create (an
// existing name is fs.ErrExist, nothing rewritten), a private file, a read
// that refuses a link, and only the marker ever removed.
func TestDirStoreMethods(t *testing.T) {
	dir := t.TempDir()
	st := DirStore(dir)
	ctx := context.Background()
	_, err := st.Create(ctx, "backoff-0001.json", []byte("one\n"))
	require.NoError(t, err)
	_, err = st.Create(ctx, "backoff-0001.json", []byte("two\n"))
	require.ErrorIs(t, err, fs.ErrExist)
	data, _, err := st.Read(ctx, "backoff-0001.json", 100)
	require.NoError(t, err)
	require.Equal(t, "one\n", string(data))
	info, err := os.Stat(filepath.Join(dir, "backoff-0001.json"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), info.Mode().Perm())
	_, _, err = st.Read(ctx, "missing.json", 100)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, os.Symlink(filepath.Join(dir, "backoff-0001.json"), filepath.Join(dir, "link.json")))
	_, _, err = st.Read(ctx, "link.json", 100)
	require.Error(t, err)
	require.NotErrorIs(t, err, fs.ErrNotExist)

	_, err = st.Create(ctx, record.MarkerName, []byte("m\n"))
	require.NoError(t, err)
	_, err = st.Create(ctx, record.MarkerName, []byte("m\n"))
	require.ErrorIs(t, err, fs.ErrExist)
	got, err := st.List(ctx, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"backoff-0001.json", "link.json", record.MarkerName}, got)
	require.Error(t, st.Remove(ctx, "backoff-0001.json", ""))
	require.NoError(t, st.Remove(ctx, record.MarkerName, ""))
	got, err = st.List(ctx, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"backoff-0001.json", "link.json"}, got)
}
