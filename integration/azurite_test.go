package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The emulator's well-known development account (public, documented by
// Microsoft for Azurite; not a secret of anyone's).
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// azuriteFlags are the blob service flags of Azurite 3.35.0 the tests use:
// port 0 (the kernel picks; Azurite prints the one it got), data in memory
// only, no telemetry (without it, shutdown hangs ~100 s offline), any
// x-ms-version the SDK sends, and unsupported headers ignored.
// --inMemoryPersistence excludes --location, so the process runs in a
// temporary directory instead.
var azuriteFlags = []string{
	"--blobHost", "127.0.0.1", "--blobPort", "0",
	"--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck", "--loose",
}

// azurite is a running Azurite blob service and what it logged.
type azurite struct {
	// URL is the service root, http://127.0.0.1:PORT (the account is the
	// first path segment: path-style URLs).
	URL string

	pgid int

	mu  sync.Mutex
	log []azuriteEntry
	// marker is notified when a log line arrives.
	marker chan struct{}
}

// azuriteEntry is one line of Azurite's access log: what the emulator saw
// and answered. The query string is dropped as the line is parsed (a SAS
// "sig" would be in it); nothing else of the line is kept.
type azuriteEntry struct {
	Method string
	Path   string
	Status int
}

var (
	listenLine = regexp.MustCompile(`successfully listens on (http://127\.0\.0\.1:\d+)`)
	accessLine = regexp.MustCompile(`"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3})`)
)

// requireAzurite skips the test, or fails it under RR_REQUIRE_AZURITE=1,
// with why the emulator cannot run.
func requireAzurite(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("RR_REQUIRE_AZURITE") == "1" {
		t.Fatalf("Azurite required (RR_REQUIRE_AZURITE=1): %s", msg)
	}
	t.Skipf("Azurite not available: %s (install it with integration/azurite.sh install; set RR_REQUIRE_AZURITE=1 to fail instead of skipping)", msg)
}

// azuriteEntryPoint returns the installed blob service script: the
// RR_AZURITE_BLOB override, or .azurite/node_modules/azurite/dist/src/blob/main.js
// in this module's directory.
func azuriteEntryPoint() (string, error) {
	if p := os.Getenv("RR_AZURITE_BLOB"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	// The tests run in the package directory, which is the module root;
	// walk up in case a subpackage uses this helper one day.
	for {
		if _, err := os.Stat(filepath.Join(dir, "azurite.sh")); err == nil {
			return filepath.Join(dir, ".azurite", "node_modules", "azurite", "dist", "src", "blob", "main.js"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("integration/azurite.sh not found above the working directory")
		}
		dir = parent
	}
}

// startAzurite starts the Azurite blob service in its own process group,
// waits for the port it listens on, and stops the whole group when the
// test ends. When node or the emulator is missing it skips (or fails under
// RR_REQUIRE_AZURITE=1). A failure to start an installed emulator always
// fails.
func startAzurite(t testing.TB) *azurite {
	t.Helper()
	entry, err := azuriteEntryPoint()
	if err != nil {
		requireAzurite(t, "%v", err)
	}
	if _, err := os.Stat(entry); err != nil {
		requireAzurite(t, "%s is missing", entry)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		requireAzurite(t, "node is not on PATH: %v", err)
	}

	cmd := exec.Command(node, append([]string{entry}, azuriteFlags...)...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AZURITE_ACCOUNTS=") { // the default account only
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// One pipe for stdout and stderr, read to EOF: EOF comes when every
	// process of the group holding its write end has exited.
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		t.Fatalf("start Azurite: %v", err)
	}
	pgid := cmd.Process.Pid // Setpgid: the group's ID is the leader's PID

	az := &azurite{marker: make(chan struct{}, 1), pgid: pgid}
	ready := make(chan string, 1)
	readerDone := make(chan struct{})
	var startup strings.Builder // non-access lines, for a failure message
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := accessLine.FindStringSubmatch(line); m != nil {
				az.record(m[1], m[2], m[3])
				continue
			}
			if m := listenLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
				continue
			}
			if startup.Len() < 4<<10 {
				startup.WriteString(line + "\n")
			}
		}
		io.Copy(io.Discard, out)
		out.Close()
	}()

	stop := func() {
		// SIGTERM to the group: Azurite closes its server and exits at
		// once (with --disableTelemetry); SIGKILL whoever is left after 10 s.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Logf("Azurite did not exit 10 s after SIGTERM; killing its process group")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		// Whatever else the group started goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}

	select {
	case u := <-ready:
		az.URL = u
	case <-readerDone:
		stop()
		t.Fatalf("Azurite exited before listening:\n%s", startup.String())
	case <-time.After(60 * time.Second):
		stop()
		<-readerDone
		t.Fatalf("Azurite did not listen within 60 s:\n%s", startup.String())
	}
	t.Cleanup(func() {
		stop()
		<-readerDone
	})
	return az
}

func (a *azurite) record(method, target, status string) {
	path := target
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	code, _ := strconv.Atoi(status)
	a.mu.Lock()
	a.log = append(a.log, azuriteEntry{Method: method, Path: path, Status: code})
	a.mu.Unlock()
	select {
	case a.marker <- struct{}{}:
	default:
	}
}

// Seen returns every request Azurite logged whose path starts with prefix,
// after making sure the log has caught up with every request answered
// before the call: it sends a marker request and waits for its line.
func (a *azurite) Seen(t testing.TB, prefix string) []azuriteEntry {
	t.Helper()
	marker := fmt.Sprintf("/%s/rr-log-marker-%d", azuriteAccount, time.Now().UnixNano())
	resp, err := http.Get(a.URL + marker)
	if err != nil {
		t.Fatalf("Azurite log marker: %v", err)
	}
	resp.Body.Close()
	deadline := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		var found bool
		var out []azuriteEntry
		for _, e := range a.log {
			if e.Path == marker {
				found = true
			}
			if strings.HasPrefix(e.Path, prefix) {
				out = append(out, e)
			}
		}
		a.mu.Unlock()
		if found {
			return out
		}
		select {
		case <-a.marker:
		case <-deadline:
			t.Fatalf("Azurite's access log did not show the marker request within 10 s")
		}
	}
}

// count returns how many of entries have method and path (status any).
func count(entries []azuriteEntry, method, path string) int {
	n := 0
	for _, e := range entries {
		if e.Method == method && e.Path == path {
			n++
		}
	}
	return n
}

// TestAzuriteHelper checks the helper itself: it learns the port, sees
// requests in the access log, and stops the whole process group.
func TestAzuriteHelper(t *testing.T) {
	var az *azurite
	t.Run("run", func(t *testing.T) {
		az = startAzurite(t)
		resp, err := http.Get(az.URL + "/" + azuriteAccount + "/nosuch/blob?sig=should-not-be-kept")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("Server"), "Azurite-Blob/3.35.0") {
			t.Fatalf("anonymous GET: status %d, server %q; want 403 from Azurite-Blob/3.35.0", resp.StatusCode, resp.Header.Get("Server"))
		}
		seen := az.Seen(t, "/"+azuriteAccount+"/nosuch/")
		if len(seen) != 1 || seen[0] != (azuriteEntry{"GET", "/" + azuriteAccount + "/nosuch/blob", 403}) {
			t.Fatalf("access log %+v", seen)
		}
	})
	if az == nil {
		t.Skip("Azurite did not run")
	}
	// The subtest's cleanup stopped the group: no process is left in it,
	// and nothing listens on the port.
	if err := syscall.Kill(-az.pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal 0 to Azurite's process group after cleanup: %v, want ESRCH", err)
	}
	if resp, err := http.Get(az.URL + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("Azurite still answers after the test's cleanup")
	}
}
