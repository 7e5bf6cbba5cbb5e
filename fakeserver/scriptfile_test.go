package fakeserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docScript is the example of docs/fakeserver.md.
const docScript = `{
  "comment": "inventory: a 429 on page 3 and on page 5",
  "rules": [
    {"route": "file.list", "nth": 3, "fault": "throttle",
     "retry_after": {"form": "seconds", "seconds": 1}},
    {"route": "file.list", "nth": 5, "fault": "throttle",
     "retry_after": {"form": "rfc850", "seconds": 2}},
    {"route": "search.put", "times": 1, "fault": "throttle",
     "retry_after": {"form": "duplicate", "values": ["1", "2"]}, "body_size": 8388608},
    {"route": "blob.get", "path_prefix": "/devstoreaccount1/checkpoints/",
     "fault": "throttle", "retry_after": {"form": "imf-fixdate", "seconds": 1}},
    {"route": "file.upload", "always": true, "fault": "throttle",
     "retry_after": {"form": "missing"}},
    {"route": "*", "method": "DELETE", "fault": "status", "status": 503},
    {"route": "blob.get", "nth": 2, "fault": "redirect", "status": 307,
     "location": "https://elsewhere.example/c/b"},
    {"route": "search.get", "fault": "slow_body", "chunk": 16, "delay": "100ms"},
    {"route": "blob.get", "nth": 4, "fault": "stalled_body"},
    {"route": "other", "fault": "reset"}
  ]
}`

// docTimedScript is docs/fakeserver.md's example of rules by time
// and by rate.
const docTimedScript = `{
  "comment": "Azure-like throttling: a 2 s window, a per-account bucket, Storage's 503",
  "rules": [
    {"route": "file.list", "window": {"duration": "2s"}, "fault": "throttle",
     "retry_after": {"form": "remaining"}},
    {"route": "search.get", "window": {"start": "2026-12-01T10:00:00Z", "duration": "1m"},
     "fault": "throttle", "retry_after": {"form": "remaining-ms"}},
    {"route": "blob.get", "token_bucket": {"rate": 200, "burst": 50},
     "fault": "throttle", "retry_after": {"form": "remaining"}},
    {"route": "*", "token_bucket": {"rate": 20, "burst": 5, "key": "host"},
     "fault": "server_busy"}
  ]
}`

func TestDocScriptMatchesDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/fakeserver.md")
	require.NoError(t, err)
	for name, script := range map[string]string{"docScript": docScript, "docTimedScript": docTimedScript} {
		assert.Contains(t, string(doc), "```json\n"+script+"\n```\n", "docs/fakeserver.md shows %s", name)
	}
}

func TestLoadTimedScript(t *testing.T) {
	s, err := LoadScript(strings.NewReader(docTimedScript))
	require.NoError(t, err)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	want := NewScript()
	want.Add(RouteFileList, Throttle(RetryAfterRemaining()), Window(time.Time{}, 2*time.Second))
	want.Add(RouteSearchGet, Throttle(RetryAfterRemainingMs()), Window(start, time.Minute))
	want.Add(RouteBlobGet, Throttle(RetryAfterRemaining()), TokenBucket(200, 50))
	want.Add(RouteAny, ServerBusy(), TokenBucket(20, 5), PerHost())
	got := s.Rules()
	require.Len(t, got, 4)
	assert.True(t, got[1].Window.Start.Equal(start))
	got[1].Window.Start = start // the parsed time's location differs, not its instant
	assert.Equal(t, want.Rules(), got)

	// A loaded script drives a server: the bucket, then Storage's 503.
	s, err = LoadScript(strings.NewReader(`{"rules":[
		{"route":"blob.get","token_bucket":{"rate":1,"burst":2,"key":"account"},"fault":"throttle","retry_after":{"form":"remaining-ms"}},
		{"route":"file.list","token_bucket":{"rate":1,"burst":1},"fault":"server_busy","body_size":4}]}`))
	require.NoError(t, err)
	srv := newServer(t, WithScript(s), fixedClock())
	c := newClient(t, srv.Transport())
	var got2 []string
	for _, p := range []string{"/c/b", "/c/b", "/c/b", "/files", "/files"} {
		resp, body := do(t, c, "GET", "http://fake.test"+p, nil)
		got2 = append(got2, fmt.Sprintf("%d %s %s %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"), body[:min(len(body), 4)]))
	}
	assert.Equal(t, []string{`404   "<?xm"`, `404   "<?xm"`, `429 1 1000 "<?xm"`, `200   "{\"va"`, `503   "<?xm"`}, got2)
	assert.Equal(t, "503 ServerBusy body=4B", srv.Requests()[4].Fault)
}

func TestLoadScript(t *testing.T) {
	s, err := LoadScript(strings.NewReader(docScript))
	require.NoError(t, err)
	want := NewScript(
		Rule{Route: RouteFileList, Nth: 3, Fault: Throttle(RetryAfterSeconds(1))},
		Rule{Route: RouteFileList, Nth: 5, Fault: Throttle(RetryAfterDate(RFC850, 2*time.Second))},
		Rule{Route: RouteSearchPut, Times: 1, Fault: Throttle(RetryAfterRaw("1", "2")).WithBodySize(8 << 20)},
		Rule{Route: RouteBlobGet, PathPrefix: "/devstoreaccount1/checkpoints/", Fault: Throttle(RetryAfterDate(IMFFixdate, time.Second))},
		Rule{Route: RouteFileUpload, Always: true, Fault: Throttle(RetryAfterMissing())},
		Rule{Route: RouteAny, Method: "DELETE", Fault: Status(503)},
		Rule{Route: RouteBlobGet, Nth: 2, Fault: Redirect(307, "https://elsewhere.example/c/b")},
		Rule{Route: RouteSearchGet, Fault: SlowBody(16, 100*time.Millisecond)},
		Rule{Route: RouteBlobGet, Nth: 4, Fault: StalledBody()},
		Rule{Route: RouteOther, Fault: ConnectionReset()},
	)
	assert.Equal(t, want.Rules(), s.Rules())
}

func TestLoadScriptForms(t *testing.T) {
	tests := []struct {
		json string
		want RetryAfter
	}{
		{`{"form":"seconds","seconds":0}`, RetryAfterSeconds(0)},
		{`{"form":"asctime","seconds":-5}`, RetryAfterDate(Asctime, -5*time.Second)},
		{`{"form":"raw","values":["soon"]}`, RetryAfterRaw("soon")},
		{`{"form":"oversized"}`, RetryAfterOversized(200)},
		{`{"form":"oversized","size":129}`, RetryAfterOversized(129)},
		{`{"form":"overlong"}`, RetryAfterOverlong(60 * time.Second)},
		{`{"form":"overlong","seconds":31}`, RetryAfterOverlong(31 * time.Second)},
	}
	for _, tc := range tests {
		s, err := LoadScript(strings.NewReader(`{"rules":[{"route":"file.list","fault":"throttle","retry_after":` + tc.json + `}]}`))
		require.NoError(t, err, tc.json)
		assert.Equal(t, tc.want, s.Rules()[0].Fault.RetryAfter(), tc.json)
	}
	s, err := LoadScript(strings.NewReader(`{"rules":[]}`))
	require.NoError(t, err)
	assert.Equal(t, 0, s.Len())
	s, err = LoadScript(strings.NewReader(`{"rules":[{"route":"blob.get","method":"get","fault":"status","status":500,"body_size":3}]}`))
	require.NoError(t, err)
	assert.Equal(t, "GET", s.Rules()[0].Method)
	assert.Equal(t, "500 body=3B", s.Rules()[0].Fault.String())
}

func TestLoadScriptErrors(t *testing.T) {
	rule := func(r string) string {
		return `{"rules": [` + "\n" + `{"route":"file.list","fault":"reset"},` + "\n" + r + "\n]}"
	}
	tests := []struct {
		name  string
		input string
		msg   string // exact Error()
		path  string
	}{
		{"syntax", "{\n  \"rules\": [\n    {\"route\": \"file.list\",}\n  ]\n}", `script: line 3, column 27: invalid JSON: invalid character '}' looking for beginning of object key string`, ``},
		{"truncated", `{"rules": [`, `script: line 1, column 12: invalid JSON: unexpected end of JSON input`, ``},
		{"trailing data", "{\"rules\": []}\n x", `script: line 2, column 2: invalid JSON: invalid character 'x' after top-level value`, ``},
		{"two objects", `{"rules": []} {}`, `script: line 1, column 15: invalid JSON: invalid character '{' after top-level value`, ``},
		{"bad utf-8 string", "{\"rules\": [\"\xff\"]}", `script: rules[0] (line 1, column 12): want a JSON object`, `rules[0]`},
		{"empty", ``, `script: line 1, column 1: invalid JSON: unexpected end of JSON input`, ``},
		{"not an object", `[1]`, `script: line 1, column 1: a script is a JSON object: {"rules": [...]}`, ``},
		{"no rules", `{}`, `script: line 1, column 1: missing "rules"`, ``},
		{"rules not array", `{"rules": {}}`, `script: rules (line 1, column 8): want an array`, `rules`},
		{"unknown top key", "{\"rules\": [],\n \"rule\": []}", `script: "rule" (line 2, column 7): unknown top-level key (want "rules" or "comment")`, `"rule"`},
		{"bad comment", `{"comment": 1, "rules": []}`, `script: comment (line 1, column 10): want a string`, `comment`},
		{"rule not object", rule(`"x"`), `script: rules[1] (line 3, column 1): want a JSON object`, `rules[1]`},
		{"unknown route", rule(`{"route":"serch.put","fault":"reset"}`), `script: rules[1].route (line 3, column 1): unknown route "serch.put" (want one of search.put, search.get, file.upload, file.list, blob.put, blob.get, other, *)`, `rules[1].route`},
		{"missing route", rule(`{"fault":"reset"}`), `script: rules[1].route (line 3, column 1): required`, `rules[1].route`},
		{"route type", rule(`{"route":1,"fault":"reset"}`), `script: rules[1].route (line 3, column 10): want a string`, `rules[1].route`},
		{"unknown field", rule(`{"route":"file.list","nht":3,"fault":"reset"}`), `script: rules[1].nht (line 3, column 1): unknown field`, `rules[1].nht`},
		{"unknown fault", rule(`{"route":"file.list","fault":"explode"}`), `script: rules[1].fault (line 3, column 1): unknown fault "explode" (want one of redirect, reset, server_busy, slow_body, stalled_body, status, throttle)`, `rules[1].fault`},
		{"missing fault", rule(`{"route":"file.list"}`), `script: rules[1].fault (line 3, column 1): required`, `rules[1].fault`},
		{"unknown form", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"rfc1123","seconds":1}}`), `script: rules[1].retry_after.form (line 3, column 1): unknown Retry-After form "rfc1123" (want one of seconds, imf-fixdate, rfc850, asctime, raw, duplicate, missing, oversized, overlong, remaining, remaining-ms)`, `rules[1].retry_after.form`},
		{"missing form", rule(`{"route":"file.list","fault":"throttle","retry_after":{}}`), `script: rules[1].retry_after.form (line 3, column 1): required`, `rules[1].retry_after.form`},
		{"missing retry_after", rule(`{"route":"file.list","fault":"throttle"}`), `script: rules[1].retry_after (line 3, column 1): a throttle needs a retry_after (use {"form": "missing"} for none)`, `rules[1].retry_after`},
		{"retry_after not object", rule(`{"route":"file.list","fault":"throttle","retry_after":5}`), `script: rules[1].retry_after (line 3, column 55): want a JSON object`, `rules[1].retry_after`},
		{"unknown retry_after field", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"seconds","secs":1}}`), `script: rules[1].retry_after.secs (line 3, column 1): unknown field`, `rules[1].retry_after.secs`},
		{"field of another form", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"seconds","values":["1"]}}`), `script: rules[1].retry_after.values (line 3, column 1): not a field of the seconds form`, `rules[1].retry_after.values`},
		{"seconds missing", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"seconds"}}`), `script: rules[1].retry_after.seconds (line 3, column 1): required`, `rules[1].retry_after.seconds`},
		{"seconds negative", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"seconds","seconds":-1}}`), `script: rules[1].retry_after.seconds (line 3, column 1): must not be negative (use the raw form for "-1")`, `rules[1].retry_after.seconds`},
		{"seconds not integer", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"seconds","seconds":1.5}}`), `script: rules[1].retry_after.seconds (line 3, column 85): want an integer`, `rules[1].retry_after.seconds`},
		{"date seconds", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"rfc850"}}`), `script: rules[1].retry_after.seconds (line 3, column 1): required`, `rules[1].retry_after.seconds`},
		{"raw two values", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"raw","values":["1","2"]}}`), `script: rules[1].retry_after.values (line 3, column 1): the raw form takes exactly one value (use duplicate for more)`, `rules[1].retry_after.values`},
		{"duplicate one value", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"duplicate","values":["1"]}}`), `script: rules[1].retry_after.values (line 3, column 1): the duplicate form takes two or more values`, `rules[1].retry_after.values`},
		{"raw injection", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"raw","values":["1\r\nX: y"]}}`), `script: rules[1].retry_after.values (line 3, column 1): value 0 holds CR, LF or NUL`, `rules[1].retry_after.values`},
		{"raw values type", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"raw","values":"1"}}`), `script: rules[1].retry_after.values (line 3, column 80): want an array of strings`, `rules[1].retry_after.values`},
		{"oversized size", rule(`{"route":"file.list","fault":"throttle","retry_after":{"form":"oversized","size":0}}`), `script: rules[1].retry_after.size (line 3, column 1): out of range [1, 65536]`, `rules[1].retry_after.size`},
		{"nth zero", rule(`{"route":"file.list","nth":0,"fault":"reset"}`), `script: rules[1].nth (line 3, column 1): must be at least 1`, `rules[1].nth`},
		{"times type", rule(`{"route":"file.list","times":"2","fault":"reset"}`), `script: rules[1].times (line 3, column 32): want an integer`, `rules[1].times`},
		{"always type", rule(`{"route":"file.list","always":1,"fault":"reset"}`), `script: rules[1].always (line 3, column 31): want true or false`, `rules[1].always`},
		{"always and times", rule(`{"route":"file.list","always":true,"times":2,"fault":"reset"}`), `script: rules[1].always (line 3, column 1): always and times exclude each other`, `rules[1].always`},
		{"method mismatch", rule(`{"route":"file.list","method":"POST","fault":"reset"}`), `script: rules[1].method (line 3, column 1): method POST never matches route file.list (which is GET only)`, `rules[1].method`},
		{"path prefix", rule(`{"route":"*","path_prefix":"c/","fault":"reset"}`), `script: rules[1].path_prefix (line 3, column 1): path prefix "c/" must start with /`, `rules[1].path_prefix`},
		{"status for throttle", rule(`{"route":"*","fault":"throttle","status":503,"retry_after":{"form":"missing"}}`), `script: rules[1].status (line 3, column 1): not a field of a throttle fault`, `rules[1].status`},
		{"status 429", rule(`{"route":"*","fault":"status","status":429}`), `script: rules[1].status (line 3, column 1): status 429: want 400 to 599, not 429 (use a throttle)`, `rules[1].status`},
		{"status missing", rule(`{"route":"*","fault":"status"}`), `script: rules[1].status (line 3, column 1): required`, `rules[1].status`},
		{"redirect code", rule(`{"route":"*","fault":"redirect","status":200,"location":"/x"}`), `script: rules[1].status (line 3, column 1): status 200: want 301, 302, 303, 307 or 308`, `rules[1].status`},
		{"redirect location", rule(`{"route":"*","fault":"redirect","status":307,"location":""}`), `script: rules[1].location (line 3, column 1): location must be a non-empty URL without CR, LF or NUL`, `rules[1].location`},
		{"body size range", rule(`{"route":"*","fault":"status","status":500,"body_size":99999999999}`), `script: rules[1].body_size (line 3, column 1): body size 99999999999 out of range [0, 67108864]`, `rules[1].body_size`},
		{"slow delay", rule(`{"route":"*","fault":"slow_body","chunk":1,"delay":"soon"}`), `script: rules[1].delay (line 3, column 1): want a Go duration such as "100ms", got "soon"`, `rules[1].delay`},
		{"slow negative", rule(`{"route":"*","fault":"slow_body","chunk":1,"delay":"-1s"}`), `script: rules[1].delay (line 3, column 1): delay must not be negative`, `rules[1].delay`},
		{"slow chunk", rule(`{"route":"*","fault":"slow_body","chunk":0,"delay":"1s"}`), `script: rules[1].chunk (line 3, column 1): chunk 0 out of range [1, 67108864]`, `rules[1].chunk`},
		{"stalled extra", rule(`{"route":"*","fault":"stalled_body","delay":"1s"}`), `script: rules[1].delay (line 3, column 1): not a field of a stalled_body fault`, `rules[1].delay`},
		{"remaining without timing", rule(`{"route":"*","fault":"throttle","retry_after":{"form":"remaining"}}`), `script: rules[1].retry_after.form (line 3, column 1): the remaining form needs a window or a token bucket on the rule`, `rules[1].retry_after.form`},
		{"remaining-ms field", rule(`{"route":"*","window":{"duration":"1s"},"fault":"throttle","retry_after":{"form":"remaining-ms","seconds":1}}`), `script: rules[1].retry_after.seconds (line 3, column 1): not a field of the remaining-ms form`, `rules[1].retry_after.seconds`},
		{"window not object", rule(`{"route":"*","window":"2s","fault":"reset"}`), `script: rules[1].window (line 3, column 26): want a JSON object`, `rules[1].window`},
		{"window unknown field", rule(`{"route":"*","window":{"duration":"2s","end":"x"},"fault":"reset"}`), `script: rules[1].window.end (line 3, column 1): unknown field`, `rules[1].window.end`},
		{"window duration missing", rule(`{"route":"*","window":{},"fault":"reset"}`), `script: rules[1].window.duration (line 3, column 1): required`, `rules[1].window.duration`},
		{"window duration bad", rule(`{"route":"*","window":{"duration":"2"},"fault":"reset"}`), `script: rules[1].window.duration (line 3, column 1): want a Go duration such as "2s", got "2"`, `rules[1].window.duration`},
		{"window duration zero", rule(`{"route":"*","window":{"duration":"0s"},"fault":"reset"}`), `script: rules[1].window.duration (line 3, column 1): the duration must be above 0`, `rules[1].window.duration`},
		{"window start bad", rule(`{"route":"*","window":{"start":"10:00","duration":"1s"},"fault":"reset"}`), `script: rules[1].window.start (line 3, column 1): want an RFC 3339 time such as "2026-12-01T10:00:00Z", got "10:00"`, `rules[1].window.start`},
		{"window start type", rule(`{"route":"*","window":{"start":1,"duration":"1s"},"fault":"reset"}`), `script: rules[1].window.start (line 3, column 32): want a string`, `rules[1].window.start`},
		{"bucket not object", rule(`{"route":"*","token_bucket":[1],"fault":"reset"}`), `script: rules[1].token_bucket (line 3, column 29): want a JSON object`, `rules[1].token_bucket`},
		{"bucket rate missing", rule(`{"route":"*","token_bucket":{"burst":1},"fault":"reset"}`), `script: rules[1].token_bucket.rate (line 3, column 1): required`, `rules[1].token_bucket.rate`},
		{"bucket rate type", rule(`{"route":"*","token_bucket":{"rate":"fast","burst":1},"fault":"reset"}`), `script: rules[1].token_bucket.rate (line 3, column 42): want a number`, `rules[1].token_bucket.rate`},
		{"bucket rate zero", rule(`{"route":"*","token_bucket":{"rate":0,"burst":1},"fault":"reset"}`), `script: rules[1].token_bucket.rate (line 3, column 1): rate 0 out of range [0.001, 1e+09] tokens per second`, `rules[1].token_bucket.rate`},
		{"bucket burst missing", rule(`{"route":"*","token_bucket":{"rate":1},"fault":"reset"}`), `script: rules[1].token_bucket.burst (line 3, column 1): required`, `rules[1].token_bucket.burst`},
		{"bucket burst zero", rule(`{"route":"*","token_bucket":{"rate":1,"burst":0},"fault":"reset"}`), `script: rules[1].token_bucket.burst (line 3, column 1): burst 0 out of range [1, 1000000]`, `rules[1].token_bucket.burst`},
		{"bucket key", rule(`{"route":"*","token_bucket":{"rate":1,"burst":1,"key":"tenant"},"fault":"reset"}`), `script: rules[1].token_bucket.key (line 3, column 1): unknown bucket key "tenant" (want account, host, subscription or deployment)`, `rules[1].token_bucket.key`},
		{"bucket unknown field", rule(`{"route":"*","token_bucket":{"rate":1,"burst":1,"refill":2},"fault":"reset"}`), `script: rules[1].token_bucket.refill (line 3, column 1): unknown field`, `rules[1].token_bucket.refill`},
		{"server_busy status", rule(`{"route":"*","fault":"server_busy","status":503}`), `script: rules[1].status (line 3, column 1): not a field of a server_busy fault`, `rules[1].status`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LoadScript(strings.NewReader(tc.input))
			assert.Nil(t, s)
			require.Error(t, err)
			assert.Equal(t, tc.msg, err.Error())
			var le *LoadError
			require.True(t, errors.As(err, &le))
			assert.Equal(t, "script", le.Doc)
			assert.Equal(t, tc.path, le.Path)
		})
	}
}

func TestLoadScriptLimits(t *testing.T) {
	_, err := LoadScript(strings.NewReader(`{"rules":[` + strings.Repeat(" ", maxScriptSize) + `]}`))
	assert.EqualError(t, err, "script: larger than 1048576 bytes")
	_, err = LoadScript(errorReader{})
	assert.ErrorIs(t, err, errBoom)
}

var errBoom = errors.New("boom")

type errorReader struct{}

func (errorReader) Read([]byte) (int, error) { return 0, errBoom }

func TestLoadScriptFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(docScript), 0o600))
	s, err := LoadScriptFile(good)
	require.NoError(t, err)
	assert.Equal(t, 10, s.Len())

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"rules":[{"route":"file.lst","fault":"reset"}]}`), 0o600))
	_, err = LoadScriptFile(bad)
	require.Error(t, err)
	assert.Equal(t, bad+`: script: rules[0].route (line 1, column 11): unknown route "file.lst" (want one of search.put, search.get, file.upload, file.list, blob.put, blob.get, other, *)`, err.Error())
	var se *LoadError
	assert.True(t, errors.As(err, &se))

	_, err = LoadScriptFile(filepath.Join(dir, "absent.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestLoadedScriptServes: a loaded script drives a server.
func TestLoadedScriptServes(t *testing.T) {
	s, err := LoadScript(strings.NewReader(docScript))
	require.NoError(t, err)
	srv := newServer(t, WithScript(s), fixedClock())
	assert.Same(t, s, srv.Script())
	for i := range 5 {
		srv.AddFile("f", []byte{byte(i)})
	}
	got := statuses(t, srv, "GET", "/files?limit=1", 6)
	assert.Equal(t, []int{200, 200, 429, 200, 429, 200}, got)
	assert.Equal(t, "429 retry-after=rfc850(+2s)", srv.Requests()[4].Fault)
}

// FuzzLoadScript: any input either loads or fails with a *LoadError or a
// read error; it never panics.
func FuzzLoadScript(f *testing.F) {
	f.Add(docScript)
	f.Add(`{"rules":[{"route":"file.list","fault":"throttle","retry_after":{"form":"oversized","size":65536}}]}`)
	f.Add(`{"rules":[{"route":"*","fault":"slow_body","chunk":9999999999,"delay":"1h"}]}`)
	f.Add(`{"rules":[{"route":"*","nth":9999999999999,"fault":"reset"}]}`)
	f.Add(`{"rules":[{"route":"*","fault":"throttle","retry_after":{"form":"rfc850","seconds":9223372036854775807}}]}`)
	f.Add(`{"rules": [1, null, {}]}`)
	f.Add(docTimedScript)
	f.Add(`{"rules":[{"route":"*","token_bucket":{"rate":1e308,"burst":1000000},"fault":"server_busy"}]}`)
	f.Add(`{"rules":[{"route":"*","token_bucket":{"rate":0.001,"burst":1000000},"window":{"duration":"2562047h"},"fault":"throttle","retry_after":{"form":"remaining-ms"}}]}`)
	f.Add(`{"rules":[{"route":"*","window":{"start":"0001-01-01T00:00:00Z","duration":"1ns"},"fault":"server_busy","body_size":0}]}`)
	f.Add("\xff")
	f.Fuzz(func(t *testing.T, input string) {
		s, err := LoadScript(strings.NewReader(input))
		if err != nil {
			var se *LoadError
			require.ErrorAs(t, err, &se)
			require.Nil(t, s, "a script and an error")
			return
		}
		for _, r := range s.Rules() {
			_ = r.String()
			_ = r.Fault.RetryAfter().Values(t0)
		}
		// Whatever loaded serves: timed rules decide at two instants.
		for _, now := range []time.Time{t0, t0.Add(time.Hour)} {
			v := s.match(matchInput{route: RouteFileList, method: "GET", path: "/files", now: now, account: "a", host: "h"})
			_ = v.fault.String()
			for _, d := range v.decisions {
				require.False(t, d.Fired && d.Wait <= 0, "a decision that fires has a wait: %+v", d)
			}
		}
	})
}

// The JSON of R94's buckets (per subscription or deployment, with the
// remaining-quota headers) loads into the rules the Go API makes.
func TestLoadQuotaBuckets(t *testing.T) {
	s, err := LoadScript(strings.NewReader(`{"rules": [
    {"route": "*", "token_bucket": {"rate": 20, "burst": 10, "key": "subscription", "quota_headers": "arm"},
     "fault": "throttle", "retry_after": {"form": "remaining"}},
    {"route": "other", "token_bucket": {"rate": 10, "burst": 5, "key": "deployment", "quota_headers": "openai"},
     "fault": "throttle", "retry_after": {"form": "remaining-ms"}}]}`))
	require.NoError(t, err)
	want := NewScript()
	want.Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(20, 10), PerSubscription(), QuotaHeaders(QuotaARM))
	want.Add(RouteOther, Throttle(RetryAfterRemainingMs()), TokenBucket(10, 5), PerDeployment(), QuotaHeaders(QuotaOpenAI))
	assert.Equal(t, want.Rules(), s.Rules())
	assert.Equal(t, QuotaARM, s.Rules()[0].Bucket.Quota)
	assert.Equal(t, BucketPerDeployment, s.Rules()[1].Bucket.Key)

	_, err = LoadScript(strings.NewReader(`{"rules": [{"route": "*", "token_bucket": {"rate": 1, "burst": 1, "quota_headers": "aws"}, "fault": "throttle", "retry_after": {"form": "remaining"}}]}`))
	var le *LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "rules[0].token_bucket.quota_headers", le.Path)
}
