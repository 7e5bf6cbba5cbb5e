package main

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// TestTimedFlagsRules: each combination of flags adds exactly these rules.
func TestTimedFlagsRules(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--window", "2s"}, []string{"* window=[first,+2s) -> 429 retry-after=remaining"}},
		{[]string{"--window", "1500ms", "--window-start", "+5s", "--route", "file.list"},
			[]string{"file.list window=[2026-12-01T10:00:05Z,+1.5s) -> 429 retry-after=remaining"}},
		{[]string{"--window", "1m", "--window-start", "2026-12-01T11:00:00Z", "--retry-after-ms"},
			[]string{"* window=[2026-12-01T11:00:00Z,+1m0s) -> 429 retry-after=remaining-ms"}},
		{[]string{"--token-bucket", "200,50"}, []string{"* bucket=200/s,burst=50,per=account -> 429 retry-after=remaining"}},
		{[]string{"--token-bucket", " 0.5 , 1 ", "--bucket-key", "host", "--retry-after-ms", "--route", "blob.get"},
			[]string{"blob.get bucket=0.5/s,burst=1,per=host -> 429 retry-after=remaining-ms"}},
		{[]string{"--token-bucket", "10,5", "--bucket-key", "account", "--server-busy"}, []string{"* bucket=10/s,burst=5,per=account -> 503 ServerBusy"}},
		{[]string{"--token-bucket", "20,10", "--bucket-key", "subscription", "--quota-headers", "arm"},
			[]string{"* bucket=20/s,burst=10,per=subscription,quota=arm -> 429 retry-after=remaining"}},
		{[]string{"--token-bucket", "10,10", "--bucket-key", "deployment", "--quota-headers", "openai", "--retry-after-ms"},
			[]string{"* bucket=10/s,burst=10,per=deployment,quota=openai -> 429 retry-after=remaining-ms"}},
		{[]string{"--server-busy", "--route", "blob.get"}, []string{"blob.get always -> 503 ServerBusy"}},
		{[]string{"--window", "2s", "--token-bucket", "1,1", "--server-busy"},
			[]string{"* window=[first,+2s) -> 503 ServerBusy", "* bucket=1/s,burst=1,per=account -> 503 ServerBusy"}},
	}
	for _, tc := range cases {
		fs, tf := newTimedFlagSet()
		require.NoError(t, fs.Parse(tc.args), tc.args)
		s := fakeserver.NewScript()
		require.NoError(t, tf.addRules(s, now), tc.args)
		var got []string
		for _, r := range s.Rules() {
			got = append(got, r.String())
		}
		assert.Equal(t, tc.want, got, tc.args)
	}
}

func newTimedFlagSet() (*flag.FlagSet, *timedFlags) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var tf timedFlags
	tf.register(fs)
	return fs, &tf
}

// TestRunFakeserverTimedUsage: bad rule flags are usage errors (exit 2)
// with a message naming the flag.
func TestRunFakeserverTimedUsage(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"--window", "soon"}, `invalid value "soon" for flag -window`},
		{[]string{"--window", "-1s"}, "--window -1s: want a duration above 0"},
		{[]string{"--window-start", "+1s"}, "--window-start needs --window"},
		{[]string{"--window", "1s", "--window-start", "tomorrow"}, `--window-start "tomorrow": want +DURATION (such as +5s) or an RFC 3339 time`},
		{[]string{"--window", "1s", "--window-start", "+-1s"}, `--window-start "+-1s": want +DURATION`},
		{[]string{"--token-bucket", "200"}, `--token-bucket "200": want RATE,BURST`},
		{[]string{"--token-bucket", "0,5"}, `--token-bucket "0,5": want RATE,BURST`},
		{[]string{"--token-bucket", "NaN,5"}, `--token-bucket "NaN,5": want RATE,BURST`},
		{[]string{"--token-bucket", "5,0"}, `--token-bucket "5,0": want RATE,BURST`},
		{[]string{"--token-bucket", "5,1000001"}, `--token-bucket "5,1000001": want RATE,BURST`},
		{[]string{"--bucket-key", "host"}, "--bucket-key needs --token-bucket"},
		{[]string{"--quota-headers", "arm"}, "--quota-headers needs --token-bucket"},
		{[]string{"--token-bucket", "1,1", "--quota-headers", "aws"}, `--quota-headers "aws": want openai or arm`},
		{[]string{"--token-bucket", "1,1", "--bucket-key", "tenant"}, `--bucket-key "tenant": want account, host, subscription or deployment`},
		{[]string{"--window", "1s", "--retry-after-ms", "--server-busy"}, "--retry-after-ms and --server-busy exclude each other"},
		{[]string{"--retry-after-ms"}, "--retry-after-ms needs --window or --token-bucket"},
		{[]string{"--route", "blob.get"}, "--route needs --window, --token-bucket or --server-busy"},
		{[]string{"--server-busy", "--route", "blob.gte"}, `--route "blob.gte": want search.put`},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := runFakeserver(t.Context(), tc.args, &stdout, &stderr)
		assert.Equal(t, 2, code, tc.args)
		assert.Contains(t, stderr.String(), tc.msg, tc.args)
		assert.Empty(t, stdout.String(), tc.args)
	}
}

// TestRunFakeserverTokenBucket: the command's bucket throttles the third
// of three quick requests, logs the decision, and leaves other routes
// alone.
func TestRunFakeserverTokenBucket(t *testing.T) {
	base, stdout, stop := startFakeserver(t, "--token-bucket", "1,2", "--retry-after-ms", "--route", "file.list")
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var statuses []int
	for _, p := range []string{"/files", "/files", "/files", "/indexes/x"} {
		resp, err := c.Get(base + p)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if len(statuses) == 3 {
			assert.Equal(t, "1", resp.Header.Get("Retry-After"))
			ms, err := strconv.Atoi(resp.Header.Get("retry-after-ms"))
			require.NoError(t, err)
			assert.True(t, ms >= 1 && ms <= 1000, "retry-after-ms %d", ms)
		}
	}
	assert.Equal(t, []int{200, 200, 429, 404}, statuses)
	assert.Equal(t, 0, stop())
	out := stdout.String()
	assert.Contains(t, out, "rule 0: file.list bucket=1/s,burst=2,per=account -> 429 retry-after=remaining-ms\n")
	assert.Regexp(t, `fault #3 file.list rule 0: 429 retry-after=remaining-ms\(1,\d+ms\) \(rule 0 token_bucket account=devstoreaccount1 tokens_left=0 fired wait=\S+\)\n`, out)
}

// TestRunFakeserverProxyTimed: in proxy mode the flags' rules answer in
// front of the upstream: a 1 s window from the first request (its
// Retry-After honoured, the upstream reached after it; about 1 s of real
// time), and Storage's 503 from a bucket.
func TestRunFakeserverProxyTimed(t *testing.T) {
	var mu sync.Mutex
	var hits []string
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), hits...) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.URL.Path)
		mu.Unlock()
		_, _ = io.WriteString(w, "upstream:"+r.URL.Path)
	}))
	defer up.Close()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url string) (*http.Response, string) {
		resp, err := c.Get(url)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}

	t.Run("window", func(t *testing.T) {
		mu.Lock()
		hits = nil
		mu.Unlock()
		base, stdout, stop := startFakeserver(t, "--upstream", up.URL, "--window", "1s", "--route", "blob.get")
		resp, _ := get(base + "/devstoreaccount1/c/b")
		require.Equal(t, 429, resp.StatusCode)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		_, body := get(base + "/files") // another route passes
		assert.Equal(t, "upstream:/files", body)
		time.Sleep(time.Second) // what Retry-After asked
		resp, body = get(base + "/devstoreaccount1/c/b")
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "upstream:/devstoreaccount1/c/b", body)
		assert.Equal(t, 0, stop())
		assert.Equal(t, []string{"/files", "/devstoreaccount1/c/b"}, seen(), "the upstream never saw the throttled request")
		assert.Regexp(t, `fault #1 blob.get rule 0: 429 retry-after=remaining\(1\) \(rule 0 window window_end=\S+ fired wait=\S+\)\n`, stdout.String())
	})
	t.Run("server busy bucket", func(t *testing.T) {
		mu.Lock()
		hits = nil
		mu.Unlock()
		base, _, stop := startFakeserver(t, "--upstream", up.URL, "--token-bucket", "0.001,1", "--server-busy")
		resp, body := get(base + "/devstoreaccount1/c/b")
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "upstream:/devstoreaccount1/c/b", body)
		resp, body = get(base + "/devstoreaccount1/c/b")
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, "ServerBusy", resp.Header.Get("x-ms-error-code"))
		assert.Empty(t, resp.Header.Values("Retry-After"))
		assert.True(t, strings.HasPrefix(body, `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>Operations per second is over the account limit.`+"\nRequestId:"+resp.Header.Get("x-ms-request-id")+"\nTime:"), body)
		assert.Equal(t, 0, stop())
		assert.Equal(t, []string{"/devstoreaccount1/c/b"}, seen())
	})
}
