package readrecovery_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/flock"
	"github.com/readrecovery/readrecovery/scopecard"
	"github.com/readrecovery/readrecovery/scopestoretest"
)

func newDirStore(t *testing.T) readrecovery.ScopeStore {
	t.Helper()
	s, err := readrecovery.DirScopeStore(filepath.Join(t.TempDir(), "scopes"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDirScopeStore(t *testing.T) {
	scopestoretest.Test(t, newDirStore)
}

// dirDump returns every path under dir and every file's content.
func dirDump(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDirScopeStoreNoScopeText(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	scopestoretest.NoScopeText(t, s, func(t *testing.T) []string { return dirDump(t, dir) })
}

// The files on disk after exchanges: exactly one subdirectory per scope
// (0700, named by the digest), its card (0600, the exact encoding), its
// lock and one record per member; nothing else.
func TestDirScopeStoreFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode = %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	scope := "https://acct.blob.core.windows.net"
	t0 := scopestoretest.T0
	card := readrecovery.ScopeCard{NotBefore: t0.Add(1500 * time.Millisecond), RequestID: "req-1", Rate: 2.5, Burst: 10, Learnt: t0}
	m := readrecovery.ScopeMember{ID: "proc-1", Demand: 4, Share: 2, Lease: time.Now().Add(time.Hour)}
	v := scopestoretest.Exchange(t, s, scope, card, m)
	if v.Card != card {
		t.Fatalf("card = %+v, want %+v", v.Card, card)
	}
	m.Lease = scopecard.Normal(m.Lease)
	if len(v.Members) != 1 || v.Members[0] != m {
		t.Fatalf("members = %+v, want [%+v]", v.Members, m)
	}

	// The first 32 hex digits of the SHA-256 of the scope's text and of
	// the member's ID (sha256sum).
	h, mh := "351982ae40f6f5dfd1a1f61fe442ade8", "d656b978a0c0ad57a9b338035a46f364"
	var got []string
	for _, p := range dirDump(t, dir) {
		if strings.HasPrefix(p, dir) {
			got = append(got, strings.TrimPrefix(p, dir))
		}
	}
	want := []string{"", "/" + h, "/" + h + "/card.json", "/" + h + "/lock", "/" + h + "/m-" + mh + ".json"}
	if !slices.Equal(got, want) {
		t.Fatalf("files = %q, want %q", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, h, "card.json"))
	if err != nil {
		t.Fatal(err)
	}
	wantCard := fmt.Sprintf(`{"v":1,"not_before_ms":%d,"request_id":"req-1","rate":2.5,"burst":10,"learnt_ms":%d}`+"\n",
		t0.Add(1500*time.Millisecond).UnixMilli(), t0.UnixMilli())
	if string(b) != wantCard {
		t.Fatalf("card.json = %q, want %q", b, wantCard)
	}
	for name, perm := range map[string]fs.FileMode{h: 0o700 | fs.ModeDir, h + "/card.json": 0o600, h + "/m-" + mh + ".json": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != perm {
			t.Fatalf("%s: mode %v (%v), want %v", name, fi.Mode(), err, perm)
		}
	}
}

// A card that fails to decode fails every exchange of its scope with a
// typed error naming its digest, and is never overwritten: not by a
// merge, not by a read.
func TestDirScopeStoreCorruptCard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	scope := scopestoretest.Scope(t)
	v := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{NotBefore: time.Now().Add(time.Minute)}, readrecovery.ScopeMember{})
	name := filepath.Join(dir, scopecard.Name(scope), "card.json")
	short := func(s string) string { return s[:min(len(s), 40)] }
	for _, bad := range []string{
		`{"v":1,"not_before_ms":1,"request_id":"","rate":0,"burst":0,"learnt_ms":0,"extra":1}`,
		`{"v":2,"not_before_ms":1,"request_id":"","rate":0,"burst":0,"learnt_ms":0}`,
		`{"v":1,"not_before_ms":-1}`,
		`{"v":1} {}`,
		`not json`,
		``,
		strings.Repeat(" ", 2000),
	} {
		if err := os.WriteFile(name, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []readrecovery.ScopeCard{{}, {NotBefore: v.Now.Add(time.Hour), RequestID: "req-2"}} {
			_, err := s.Exchange(context.Background(), scope, c, readrecovery.ScopeMember{})
			var ce *scopecard.CorruptError
			if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.As(err, &ce) {
				t.Fatalf("card %q: err = %v, want ErrScopeStore and a *CorruptError", short(bad), err)
			}
			if ce.Name != scopecard.Name(scope)+"/card.json" || strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("card %q: error %v, want one naming the digest only", short(bad), err)
			}
			b, err := os.ReadFile(name)
			if err != nil || string(b) != bad {
				t.Fatalf("card %q overwritten: %q (%v)", short(bad), short(string(b)), err)
			}
		}
	}
}

// Waiting for the scope's lock is bounded by the exchange's context; a
// read (a card that changes nothing) takes no lock.
func TestDirScopeStoreLockWaitBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	scope := scopestoretest.Scope(t)
	nb := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Now.Add(time.Minute)
	first := readrecovery.ScopeCard{NotBefore: nb, RequestID: "req-1"}
	scopestoretest.Exchange(t, s, scope, first, readrecovery.ScopeMember{})
	lf, err := os.OpenFile(filepath.Join(dir, scopecard.Name(scope), "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := flock.Lock(lf, true); err != nil {
		t.Skipf("no file locks here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Exchange(ctx, scope, readrecovery.ScopeCard{NotBefore: nb.Add(time.Second), RequestID: "req-2"}, readrecovery.ScopeMember{})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, readrecovery.ErrScopeStore) {
		t.Fatalf("err = %v, want DeadlineExceeded and ErrScopeStore", err)
	}
	if took < 100*time.Millisecond || took > time.Second {
		t.Fatalf("returned after %v, want just after the 100 ms deadline", took)
	}
	// Under the lock, a card that changes nothing still reads.
	v := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{NotBefore: nb.Add(-time.Second), RequestID: "req-3"}, readrecovery.ScopeMember{})
	if v.Card != first {
		t.Fatalf("card = %+v, want %+v", v.Card, first)
	}
	lf.Close()
	v = scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{NotBefore: nb.Add(time.Second), RequestID: "req-2"}, readrecovery.ScopeMember{})
	if v.Card.RequestID != "req-2" {
		t.Fatalf("after the lock's release card = %+v, want req-2's", v.Card)
	}
}

// A member record whose lease ended more than ten of its periods ago is
// removed from disk; one that ended recently stays on disk, not returned;
// a corrupt record and a record under another member's name are skipped;
// a stale temporary file is removed.
func TestDirScopeStoreMemberCleanup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	scope := scopestoretest.Scope(t)
	now := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Now
	sd := filepath.Join(dir, scopecard.Name(scope))
	write := func(name string, b []byte) string {
		p := filepath.Join(sd, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := func(id string, leaseAgo, period time.Duration) []byte {
		lease := now.Add(-leaseAgo)
		return scopecard.EncodeMember(scopecard.Member{ID: id, Demand: 1, Share: 1, Lease: lease}, lease.Add(-period))
	}
	stale := write("m-"+scopecard.Name("old")+".json", rec("old", 11*time.Minute, time.Minute))
	recent := write("m-"+scopecard.Name("recent")+".json", rec("recent", 9*time.Minute, time.Minute))
	live := scopecard.Member{ID: "live", Demand: 3, Share: 2, Lease: now.Add(time.Hour)}
	write("m-"+scopecard.Name("live")+".json", scopecard.EncodeMember(live, now))
	write("m-"+scopecard.Name("imposter")+".json", scopecard.EncodeMember(scopecard.Member{ID: "other", Lease: now.Add(time.Hour)}, now))
	corrupt := write("m-"+scopecard.Name("corrupt")+".json", []byte(`{"v":1,"id":"corrupt","lease_ms":"x"}`))
	tmp := write(".tmp-123", []byte("half"))
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	freshTmp := write(".tmp-456", []byte("half"))

	v := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{})
	if len(v.Members) != 1 || v.Members[0] != readrecovery.ScopeMember(live) {
		t.Fatalf("members = %+v, want only %+v", v.Members, live)
	}
	for p, want := range map[string]bool{stale: false, recent: true, corrupt: true, tmp: false, freshTmp: true} {
		_, err := os.Stat(p)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(p), got, want)
		}
	}
}

// DirScopeStore refuses a path that is a file, and an exchange whose
// directory has become unusable fails with ErrScopeStore.
func TestDirScopeStoreBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readrecovery.DirScopeStore(file); !errors.Is(err, readrecovery.ErrScopeStore) {
		t.Fatalf("DirScopeStore(file) err = %v, want ErrScopeStore", err)
	}
	if _, err := readrecovery.DirScopeStore(filepath.Join(file, "sub")); !errors.Is(err, readrecovery.ErrScopeStore) {
		t.Fatalf("DirScopeStore(file/sub) err = %v, want ErrScopeStore", err)
	}
	if _, err := readrecovery.DirScopeStore(""); !errors.Is(err, readrecovery.ErrScopeStore) {
		t.Fatalf(`DirScopeStore("") err = %v, want ErrScopeStore`, err)
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, err := readrecovery.DirScopeStore(ro); !errors.Is(err, readrecovery.ErrScopeStore) {
			t.Fatalf("DirScopeStore(read-only) err = %v, want ErrScopeStore", err)
		}
	}

	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // the directory is now a file
		t.Fatal(err)
	}
	_, err = s.Exchange(context.Background(), "https://acct.blob.core.windows.net", readrecovery.ScopeCard{NotBefore: time.Now()}, readrecovery.ScopeMember{})
	if !errors.Is(err, readrecovery.ErrScopeStore) || !errors.Is(err, fs.ErrNotExist) && !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("exchange in a directory that became a file: err = %v, want ErrScopeStore (not a directory)", err)
	}
	if strings.Contains(err.Error(), "acct") {
		t.Fatalf("the error names the scope: %v", err)
	}
}

// F3 across processes: four processes (this test binary, re-run) each
// exchange 250 different not-befores for one scope of one directory at
// the same time, 1,000 in all. Each checks that every answer holds at
// least what it wrote and never less than its previous answer (a lost
// update shows as a drop); at the end the card holds the maximum written
// by any of them, with its request ID.
func TestDirScopeStoreF3Processes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	const procs, each = 4, 250
	dir := filepath.Join(t.TempDir(), "scopes")
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	scope := scopestoretest.Scope(t)
	base := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Now.Add(time.Hour)
	type child struct {
		cmd *exec.Cmd
		in  *os.File
		out *bufio.Reader
	}
	var kids []child
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDirScopeStoreF3Process$", "-test.count=1", "-test.v=false")
		cmd.Env = append(os.Environ(),
			"RR_SCOPESTORE_F3_DIR="+dir, "RR_SCOPESTORE_F3_SCOPE="+scope,
			"RR_SCOPESTORE_F3_WRITER="+strconv.Itoa(i), "RR_SCOPESTORE_F3_BASE="+strconv.FormatInt(base.UnixMilli(), 10),
			"RR_SCOPESTORE_F3_EACH="+strconv.Itoa(each), "RR_SCOPESTORE_F3_PROCS="+strconv.Itoa(procs))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		kids = append(kids, child{cmd: cmd, in: stdin.(*os.File), out: bufio.NewReader(out)})
	}
	for i, k := range kids { // all ready, then all go
		if line, err := k.out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("child %d: %q %v", i, line, err)
		}
	}
	for _, k := range kids {
		k.in.WriteString("go\n")
	}
	var maxMS int64
	var maxID string
	for i, k := range kids {
		line, err := k.out.ReadString('\n')
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		var ms int64
		var id string
		if _, err := fmt.Sscanf(line, "max %d %s\n", &ms, &id); err != nil {
			t.Fatalf("child %d said %q", i, line)
		}
		if err := k.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if ms > maxMS {
			maxMS, maxID = ms, id
		}
	}
	got := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{}, readrecovery.ScopeMember{}).Card
	lost := 0
	if got.NotBefore.UnixMilli() != maxMS || got.RequestID != maxID {
		lost = 1
	}
	t.Logf("F3 processes: %d processes x %d exchanges = %d writes; %d lost (card %d %s, maximum %d %s)", procs, each, procs*each, lost, got.NotBefore.UnixMilli(), got.RequestID, maxMS, maxID)
	if lost != 0 {
		t.Fatal("F3 processes: the card lost the maximum")
	}
}

// TestDirScopeStoreF3Process is not a test of its own:
// TestDirScopeStoreF3Processes runs it as a child process.
func TestDirScopeStoreF3Process(t *testing.T) {
	dir := os.Getenv("RR_SCOPESTORE_F3_DIR")
	if dir == "" {
		t.Skip("a helper process")
	}
	scope := os.Getenv("RR_SCOPESTORE_F3_SCOPE")
	writer, _ := strconv.Atoi(os.Getenv("RR_SCOPESTORE_F3_WRITER"))
	each, _ := strconv.Atoi(os.Getenv("RR_SCOPESTORE_F3_EACH"))
	procs, _ := strconv.Atoi(os.Getenv("RR_SCOPESTORE_F3_PROCS"))
	baseMS, _ := strconv.ParseInt(os.Getenv("RR_SCOPESTORE_F3_BASE"), 10, 64)
	base := time.UnixMilli(baseMS).UTC()
	s, err := readrecovery.DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		t.Fatalf("stdin: %q %v", line, err)
	}
	var mine time.Time
	var mineID string
	var last time.Time
	for r := range each {
		nb := base.Add(time.Duration(rand.IntN(20*(r+1))*procs+writer) * time.Millisecond)
		id := fmt.Sprintf("p%d-r%d", writer, r)
		v := scopestoretest.Exchange(t, s, scope, readrecovery.ScopeCard{NotBefore: nb, RequestID: id}, readrecovery.ScopeMember{})
		if v.Card.NotBefore.Before(nb) || v.Card.NotBefore.Before(last) {
			t.Fatalf("round %d: answer %v, below what this process wrote (%v) or last saw (%v): a lost update", r, v.Card.NotBefore, nb, last)
		}
		last = v.Card.NotBefore
		if nb.After(mine) {
			mine, mineID = nb, id
		}
	}
	fmt.Fprintf(os.Stdout, "max %d %s\n", mine.UnixMilli(), mineID)
}
