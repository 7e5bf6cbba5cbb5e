package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildCommand builds the readrecovery binary into dir.
func buildCommand(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the command; skipped with -short")
	}
	bin := filepath.Join(dir, "readrecovery")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the binary")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

var listeningRE = regexp.MustCompile(`^listening on (http://127\.0\.0\.1:\d+)$`)

// TestFakeserverSubprocess runs the built `readrecovery fakeserver` as a
// process.
func TestFakeserverSubprocess(t *testing.T) {
	bin := buildCommand(t, t.TempDir())
	t.Run("serve and SIGTERM", func(t *testing.T) { testServeAndTerm(t, bin) })
	t.Run("bad script", func(t *testing.T) { testBadScript(t, bin) })
}

// testServeAndTerm: the command announces its address first, serves and
// logs a request and its fault, and exits 0 on SIGTERM.
func testServeAndTerm(t *testing.T, bin string) {
	if runtime.GOOS == "windows" {
		t.Skip("SIGTERM")
	}
	script := filepath.Join(t.TempDir(), "script.json")
	require.NoError(t, os.WriteFile(script, []byte(`{"rules":[
		{"route":"file.list","nth":2,"fault":"throttle","retry_after":{"form":"imf-fixdate","seconds":1}}
	]}`), 0o600))

	cmd := exec.Command(bin, "fakeserver", "--addr", "127.0.0.1:0", "--script", script)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "stdout closed; stderr: %s", stderr.String())
			return l
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no line from the command", "stderr: %s", stderr.String())
			return ""
		}
	}

	first := next()
	m := listeningRE.FindStringSubmatch(first)
	require.NotNil(t, m, "first line %q", first)
	base := m[1]
	assert.Equal(t, "rule 0: file.list nth=2 -> 429 retry-after=imf-fixdate(+1s)", next())

	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i, want := range []int{200, 429} {
		resp, err := c.Get(base + "/files?limit=5&sig=SECRET")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, i)
	}
	resp, err := c.Post(base+"/files", "text/plain", strings.NewReader("row"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 201, resp.StatusCode)

	var logged []string
	for range 4 { // two requests, a fault, an upload
		logged = append(logged, next())
	}
	assert.Regexp(t, `^\S+Z request #1 GET file.list "/files" query-keys=limit,sig -> 200 id=\S+$`, logged[0])
	assert.Regexp(t, `^\S+Z request #2 GET file.list "/files" query-keys=limit,sig -> 429 id=\S+$`, logged[1])
	assert.Regexp(t, `^\S+Z fault #2 file.list rule 0: 429 retry-after=imf-fixdate\(\+1s\)$`, logged[2])
	assert.Regexp(t, `^\S+Z request #3 POST file.upload "/files" -> 201 id=\S+ body=3B sha256:[0-9a-f]{64}$`, logged[3])
	for _, l := range logged {
		assert.NotContains(t, l, "SECRET")
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "exit 0; stderr: %s", stderr.String())
		assert.Equal(t, 0, cmd.ProcessState.ExitCode())
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no exit within 5 s of SIGTERM")
	}
	assert.Contains(t, stderr.String(), "readrecovery: fakeserver: stopped")
}

// testBadScript: exit 2, and the message names the rule.
func testBadScript(t *testing.T, bin string) {
	script := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(script, []byte("{\"rules\": [\n  {\"route\": \"file.list\", \"fault\": \"reset\"},\n  {\"route\": \"serch.put\", \"fault\": \"reset\"}\n]}"), 0o600))

	cmd := exec.Command(bin, "fakeserver", "--script", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Empty(t, stdout.String(), "nothing listens")
	assert.Equal(t, "readrecovery: fakeserver: --script "+script+`: script: rules[1].route (line 3, column 3): unknown route "serch.put" (want one of search.put, search.get, file.upload, file.list, blob.put, blob.get, other, *)`+"\n", stderr.String())
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startFakeserver runs runFakeserver in-process until the returned stop is
// called; it returns the base URL and stop, which returns the exit code.
func startFakeserver(t *testing.T, args ...string) (string, *syncBuffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runFakeserver(ctx, args, &stdout, &stderr) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		first, _, _ := strings.Cut(stdout.String(), "\n")
		if m := listeningRE.FindStringSubmatch(first); m != nil {
			return m[1], &stdout, func() int {
				cancel()
				select {
				case c := <-code:
					return c
				case <-time.After(5 * time.Second):
					require.FailNow(t, "runFakeserver did not return")
					return -1
				}
			}
		}
		select {
		case c := <-code:
			cancel()
			require.FailNow(t, "runFakeserver returned early", "exit %d; stderr: %s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			require.FailNow(t, "no listening line", "stdout %q stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunFakeserverInProcess(t *testing.T) {
	base, stdout, stop := startFakeserver(t)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(base + "/indexes/missing?api-version=1")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)
	assert.Contains(t, string(body), "ResourceNotFound")

	req, _ := http.NewRequest("GET", base+"/c/b%0Aforged%20line", nil)
	req.Header.Set("Authorization", "Bearer TOKEN")
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	assert.Equal(t, 0, stop())
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 3, stdout.String())
	assert.Regexp(t, `request #1 GET search.get "/indexes/missing" query-keys=api-version -> 404 id=`, lines[1])
	assert.Regexp(t, `request #2 GET blob.get "/c/b\\nforged line" -> 404 id=`, lines[2], "a path cannot forge a log line")
	assert.NotContains(t, stdout.String(), "TOKEN")
}

func TestRunFakeserverProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-request-id", "from-upstream")
		_, _ = io.WriteString(w, "upstream:"+r.URL.Path)
	}))
	defer up.Close()
	script := filepath.Join(t.TempDir(), "s.json")
	require.NoError(t, os.WriteFile(script, []byte(`{"rules":[{"route":"blob.get","path_prefix":"/devstoreaccount1/c/","nth":1,"fault":"throttle","retry_after":{"form":"seconds","seconds":1}}]}`), 0o600))

	base, stdout, stop := startFakeserver(t, "--upstream", up.URL, "--script", script)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, want := range []struct {
		status int
		body   string
	}{{429, ""}, {200, "upstream:/devstoreaccount1/c/b"}} {
		resp, err := c.Get(base + "/devstoreaccount1/c/b")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, want.status, resp.StatusCode)
		if want.body != "" {
			assert.Equal(t, want.body, string(body))
		}
	}
	assert.Equal(t, 0, stop())
	out := stdout.String()
	assert.Contains(t, out, "proxying to "+up.URL+"\n")
	assert.Contains(t, out, "fault #1 blob.get rule 0: 429 retry-after=seconds(1)\n")
	assert.Contains(t, out, `request #2 GET blob.get "/devstoreaccount1/c/b" -> 200 id=from-upstream`)
}

func TestRunFakeserverUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--upstream", "ftp://x"}, 2, `--upstream "ftp://x": want an absolute http or https URL`},
		{[]string{"--upstream", "http://user:pw@x"}, 2, `want an absolute http or https URL without credentials`},
		{[]string{"--script", "/nonexistent/script.json"}, 2, "--script open /nonexistent/script.json"},
		{[]string{"--seed", "/nonexistent/seed.json"}, 2, "readrecovery: fakeserver: --seed open /nonexistent/seed.json"},
		{[]string{"--seed", "/nonexistent/seed.json", "--upstream", "http://127.0.0.1:10000"}, 2,
			"readrecovery: fakeserver: --seed preloads the in-memory fake; a proxy's state is its upstream's (drop --seed or --upstream)\n"},
		{[]string{"--addr", "256.1.1.1:bad"}, 1, "readrecovery: fakeserver: listen tcp"},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := runFakeserver(t.Context(), tc.args, &stdout, &stderr)
		assert.Equal(t, tc.code, code, tc.args)
		assert.Contains(t, stderr.String(), tc.msg, tc.args)
		assert.Empty(t, stdout.String(), tc.args)
	}
	// A requested usage goes to stdout.
	var stdout, stderr0 bytes.Buffer
	assert.Equal(t, 0, runFakeserver(t.Context(), []string{"-h"}, &stdout, &stderr0))
	assert.Contains(t, stdout.String(), "usage: readrecovery fakeserver")
	assert.Empty(t, stderr0.String())
	// The address in use: exit 1.
	base, _, stop := startFakeserver(t)
	var stderr bytes.Buffer
	code := runFakeserver(t.Context(), []string{"--addr", strings.TrimPrefix(base, "http://")}, io.Discard, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "address already in use")
	assert.Equal(t, 0, stop())
}

// TestRunFakeserverSeed: --seed preloads the fake, readable through
// Azurite's path-style URL; health probes before and between requests
// neither use up the script's nth count nor appear in the request log.
func TestRunFakeserverSeed(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.json")
	require.NoError(t, os.WriteFile(seed, []byte(`{
		"indexes": [{"name": "hotels", "definition": {"fields": []}}],
		"files": [{"name": "a.csv", "content": "a"}, {"name": "b.csv", "content": "b"}],
		"blobs": [{"container": "checkpoints", "name": "c1/source.json", "json": {"source": 1}}]
	}`), 0o600))
	script := filepath.Join(dir, "script.json")
	require.NoError(t, os.WriteFile(script, []byte(`{"rules":[{"route":"*","nth":2,"fault":"throttle","retry_after":{"form":"seconds","seconds":1}}]}`), 0o600))

	base, stdout, stop := startFakeserver(t, "--seed", seed, "--script", script)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	status, body := get("/_fakeserver/health")
	assert.Equal(t, 200, status)
	assert.JSONEq(t, `{"status":"ok","requests":0}`, body)
	status, body = get("/devstoreaccount1/checkpoints/c1/source.json")
	assert.Equal(t, 200, status)
	assert.Equal(t, `{"source":1}`, body)
	status, _ = get("/_fakeserver/health")
	assert.Equal(t, 200, status)
	status, _ = get("/files?limit=1")
	assert.Equal(t, 429, status, "nth=2: the second Azure request, the probes uncounted")
	status, body = get("/files?limit=1")
	assert.Equal(t, 200, status)
	assert.Contains(t, body, `"id":"file-000001","name":"a.csv"`)
	status, body = get("/_fakeserver/ledger")
	assert.Equal(t, 200, status)
	assert.Equal(t, 3, strings.Count(body, `"seq":`), "the ledger holds the three Azure requests: %s", body)
	status, _ = get("/indexes/hotels")
	assert.Equal(t, 200, status)

	assert.Equal(t, 0, stop())
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 8, stdout.String())
	assert.Equal(t, "rule 0: * nth=2 -> 429 retry-after=seconds(1)", lines[1])
	assert.Equal(t, "seeded indexes=1 files=2 blobs=1", lines[2])
	assert.Regexp(t, `^\S+Z request #1 GET blob.get "/devstoreaccount1/checkpoints/c1/source.json" -> 200 id=\S+$`, lines[3])
	assert.Regexp(t, `^\S+Z request #2 GET file.list "/files" query-keys=limit -> 429 id=\S+$`, lines[4])
	assert.Regexp(t, `^\S+Z fault #2 file.list rule 0: 429 retry-after=seconds\(1\)$`, lines[5])
	assert.Regexp(t, `^\S+Z request #3 GET file.list "/files" query-keys=limit -> 200 id=\S+$`, lines[6])
	assert.Regexp(t, `^\S+Z request #4 GET search.get "/indexes/hotels" -> 200 id=\S+$`, lines[7])
	assert.NotContains(t, stdout.String(), "_fakeserver", "probes are not logged as requests")
}

// TestRunFakeserverAccount: --account names the path-style account
// segment; "" leaves the plain layout only.
func TestRunFakeserverAccount(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "seed.json")
	require.NoError(t, os.WriteFile(seed, []byte(`{"blobs": [{"container": "c", "name": "b", "content": "B"}]}`), 0o600))
	tests := []struct {
		account string
		want    map[string]int
	}{
		{"myaccount", map[string]int{"/myaccount/c/b": 200, "/c/b": 200, "/devstoreaccount1/c/b": 404}},
		{"", map[string]int{"/c/b": 200, "/devstoreaccount1/c/b": 404}},
	}
	for _, tc := range tests {
		base, _, stop := startFakeserver(t, "--seed", seed, "--account", tc.account)
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for path, want := range tc.want {
			resp, err := c.Get(base + path)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, want, resp.StatusCode, "--account %q GET %s", tc.account, path)
		}
		assert.Equal(t, 0, stop())
	}
}

// TestRunFakeserverBadSeed: exit 2, nothing listens, and the message names
// the file, the entry and the field.
func TestRunFakeserverBadSeed(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "seed.json")
	require.NoError(t, os.WriteFile(seed, []byte("{\"blobs\": [\n  {\"container\": \"c\", \"name\": \"b\", \"content\": \"\"},\n  {\"name\": \"b\", \"content\": \"\"}\n]}"), 0o600))
	var stdout, stderr bytes.Buffer
	code := runFakeserver(t.Context(), []string{"--seed", seed}, &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout.String())
	assert.Equal(t, "readrecovery: fakeserver: --seed "+seed+": seed: blobs[1].container (line 3, column 3): required\n", stderr.String())
}
