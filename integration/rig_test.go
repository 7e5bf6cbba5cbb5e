package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/rrazuretest"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// rig is one test's world: Azurite, a container of its own in it, and the
// fakeserver proxy in front of Azurite with the test's script.
type rig struct {
	t         testing.TB
	az        *azurite
	proxy     *fakeserver.Server
	proxyURL  string // http://127.0.0.1:PORT
	container string
	script    *fakeserver.Script
	direct    *azblob.Client // straight to Azurite: setup and checks
	// setupLines is how many of Azurite's log lines for the container
	// the setup (seed) made; azuriteSaw leaves them out.
	setupLines int
}

// rigOption changes how the proxy forwards to Azurite.
type rigOption func(*rigConfig)

type rigConfig struct {
	upstream func(base http.RoundTripper) http.RoundTripper
}

// withUpstream wraps the transport the proxy forwards to Azurite with.
func withUpstream(wrap func(base http.RoundTripper) http.RoundTripper) rigOption {
	return func(c *rigConfig) { c.upstream = wrap }
}

// newRig makes a container in az and a proxy in front of az. The rules of
// the returned rig's script are matched against the requests that reach
// the proxy.
func newRig(t testing.TB, az *azurite, opts ...rigOption) *rig {
	t.Helper()
	var cfg rigConfig
	for _, o := range opts {
		o(&cfg)
	}
	upstream, err := url.Parse(az.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, az: az, script: &fakeserver.Script{}, container: "rr-" + randomHex(6)}
	var proxyOpts []fakeserver.Option
	if cfg.upstream != nil {
		base := cleanhttp.DefaultPooledTransport()
		base.DisableCompression = true // bodies pass unchanged, as the proxy's own default does
		t.Cleanup(base.CloseIdleConnections)
		proxyOpts = append(proxyOpts, fakeserver.WithUpstreamTransport(cfg.upstream(base)))
	}
	r.proxy = fakeserver.NewProxy(upstream, r.script, proxyOpts...)
	r.proxyURL, err = r.proxy.Start()
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { r.proxy.Close() })

	r.direct = newBlobClient(t, az.URL, policy.ClientOptions{})
	if _, err := r.direct.CreateContainer(context.Background(), r.container, nil); err != nil {
		t.Fatalf("create container %s in Azurite: %v", r.container, err)
	}
	return r
}

// prefix is the path prefix of the rig's container: /devstoreaccount1/CONTAINER/.
func (r *rig) prefix() string { return "/" + azuriteAccount + "/" + r.container + "/" }

// blobPath is the path of a blob of the rig's container.
func (r *rig) blobPath(name string) string { return r.prefix() + name }

// seed stores a blob straight in Azurite and returns its ETag.
func (r *rig) seed(name string, data []byte) string {
	r.t.Helper()
	resp, err := r.direct.UploadBuffer(context.Background(), r.container, name, data, nil)
	if err != nil {
		r.t.Fatalf("seed %s: %v", name, err)
	}
	r.setupLines = len(r.az.Seen(r.t, r.prefix()))
	return string(*resp.ETag)
}

// client returns an azblob client through the proxy with shared-key auth
// and options o.
func (r *rig) client(o policy.ClientOptions) *azblob.Client {
	r.t.Helper()
	return newBlobClient(r.t, r.proxyURL, o)
}

// azuriteSaw returns what Azurite logged for the blobs of the rig's
// container, after the setup.
func (r *rig) azuriteSaw() []azuriteEntry {
	r.t.Helper()
	return r.az.Seen(r.t, r.prefix())[r.setupLines:]
}

// ledger returns the proxy's ledger entries of the rig's container.
func (r *rig) ledger() []fakeserver.Request {
	var out []fakeserver.Request
	for _, q := range r.proxy.Requests() {
		if strings.HasPrefix(q.Path, r.prefix()) {
			out = append(out, q)
		}
	}
	return out
}

func newBlobClient(t testing.TB, serviceURL string, o policy.ClientOptions) *azblob.Client {
	t.Helper()
	cred, err := azblobSharedKey(azuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	return newBlobClientWithCred(t, serviceURL, cred, o)
}

func azblobSharedKey(key string) (*azblob.SharedKeyCredential, error) {
	return azblob.NewSharedKeyCredential(azuriteAccount, key)
}

func newBlobClientWithCred(t testing.TB, serviceURL string, cred *azblob.SharedKeyCredential, o policy.ClientOptions) *azblob.Client {
	t.Helper()
	c, err := azblob.NewClientWithSharedKeyCredential(serviceURL+"/"+azuriteAccount+"/", cred, &azblob.ClientOptions{ClientOptions: o})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rrOptions returns the adapter's options over base (nil: go-cleanhttp),
// with a per-try counter: azcore's retry policy runs a per-retry policy
// once per try, so tries tells whether azcore retried.
func rrOptions(base http.RoundTripper, tries *atomic.Int32, opts ...readrecovery.Option) policy.ClientOptions {
	var o policy.ClientOptions
	rrazure.Apply(&o, readrecovery.New(base, opts...))
	if tries != nil {
		o.PerRetryPolicies = append(o.PerRetryPolicies, rrazuretest.CountTries(tries))
	}
	return o
}

// download reads a whole blob.
func download(ctx context.Context, c *azblob.Client, container, name string) ([]byte, error) {
	resp, err := c.DownloadStream(ctx, container, name, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// responseError returns err as azcore's *ResponseError, failing the test
// when it is not one.
func responseError(t testing.TB, err error) *azcore.ResponseError {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want an *azcore.ResponseError", err, err)
	}
	return re
}

// stopError returns err as the transport's *StopError, failing the test
// when errors.Is(err, ErrSequenceStopped) does not hold.
func stopError(t testing.TB, err error) *readrecovery.StopError {
	t.Helper()
	var se *readrecovery.StopError
	if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want ErrSequenceStopped", err, err)
	}
	return se
}

// attempt is what one request looked like as it left readrecovery for the
// network: digests of its credentials, never the values.
type attempt struct {
	Method, Path string
	AuthDigest   string // sha256 of the Authorization header, "" when none
	QueryDigest  string // sha256 of the raw query (a SAS)
	Date         string // x-ms-date
	ClientReqID  string // x-ms-client-request-id
}

// recorder is a base transport (beneath readrecovery) that records each
// attempt and keeps the secrets it saw, so that a test can look for them
// where they must not be.
type recorder struct {
	base http.RoundTripper

	mu       sync.Mutex
	attempts []attempt
	secrets  map[string]bool
}

func newRecorder(base http.RoundTripper) *recorder {
	if base == nil {
		base = cleanhttp.DefaultPooledTransport()
	}
	return &recorder{base: base, secrets: map[string]bool{}}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attempt{Method: req.Method, Path: req.URL.Path, Date: req.Header.Get("x-ms-date"),
		ClientReqID: req.Header.Get("x-ms-client-request-id")}
	r.mu.Lock()
	if v := req.Header.Get("Authorization"); v != "" {
		a.AuthDigest = digest(v)
		r.secrets[v] = true
		// The signature alone, as it would appear if a header value were
		// split: "SharedKey account:SIGNATURE".
		if _, sig, ok := strings.Cut(v, ":"); ok {
			r.secrets[sig] = true
		}
	}
	if q := req.URL.RawQuery; q != "" {
		a.QueryDigest = digest(q)
		if sig := req.URL.Query().Get("sig"); sig != "" {
			r.secrets[sig] = true
			r.secrets[url.QueryEscape(sig)] = true
		}
	}
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}

func (r *recorder) Attempts() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.attempts...)
}

// Secrets returns every credential value the recorder saw, and the
// account key.
func (r *recorder) Secrets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{azuriteKey}
	for s := range r.secrets {
		out = append(out, s)
	}
	return out
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ackLost is an upstream transport for the proxy that lets the first PUT of
// path reach Azurite (which stores the blob and answers 201) and then
// answers the client 429 with Retry-After: 1 instead: a write whose ACK was
// lost. It stands for a gateway that throttled the response after the
// backend committed; fakeserver has no such fault of its own.
type ackLost struct {
	base  http.RoundTripper
	path  string
	fired atomic.Bool
}

func (a *ackLost) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPut || req.URL.Path != a.path || !a.fired.CompareAndSwap(false, true) {
		return resp, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, errors.New("ackLost: the upstream did not store the blob: " + resp.Status)
	}
	body := []byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>TooManyRequests</Code><Message>throttled after commit (test)</Message></Error>`)
	h := http.Header{}
	h.Set("Retry-After", "1")
	h.Set("x-ms-request-id", "ack-lost-"+randomHex(8))
	h.Set("x-ms-error-code", "TooManyRequests")
	h.Set("Content-Type", "application/xml")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	return &http.Response{
		Status: "429 Too Many Requests", StatusCode: http.StatusTooManyRequests,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		Request: req,
	}, nil
}

// runProcess runs cmd to its end and returns its exit code and what it
// printed; a process that could not run fails the test.
func runProcess(t testing.TB, cmd *exec.Cmd) (code int, stdout, stderr *bytes.Buffer) {
	t.Helper()
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout, stderr
	case err != nil:
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	return 0, stdout, stderr
}
