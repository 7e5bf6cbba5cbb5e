package fakeserver

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// statuses sends n GETs to path and returns the statuses.
func statuses(t *testing.T, s *Server, method, path string, n int) []int {
	t.Helper()
	c := newClient(t, s.Transport())
	var out []int
	for range n {
		resp, _ := do(t, c, method, "http://fake.test"+path, nil)
		out = append(out, resp.StatusCode)
	}
	return out
}

func TestRuleWindows(t *testing.T) {
	tr := Throttle(RetryAfterSeconds(1))
	tests := []struct {
		name  string
		rules func(s *Script)
		want  []int
	}{
		{"none", func(s *Script) {}, []int{200, 200, 200, 200, 200}},
		{"default is always", func(s *Script) { s.Add(RouteFileList, tr) }, []int{429, 429, 429, 429, 429}},
		{"always", func(s *Script) { s.Add(RouteFileList, tr, Always()) }, []int{429, 429, 429, 429, 429}},
		{"nth alone fires once", func(s *Script) { s.Add(RouteFileList, tr, Nth(3)) }, []int{200, 200, 429, 200, 200}},
		{"times", func(s *Script) { s.Add(RouteFileList, tr, Times(2)) }, []int{429, 429, 200, 200, 200}},
		{"nth and times", func(s *Script) { s.Add(RouteFileList, tr, Nth(2), Times(2)) }, []int{200, 429, 429, 200, 200}},
		{"nth and always: persistent from the nth", func(s *Script) { s.Add(RouteFileList, tr, Nth(4), Always()) }, []int{200, 200, 200, 429, 429}},
		{"queue of two Times(1)", func(s *Script) {
			s.Add(RouteFileList, tr, Times(1)).Add(RouteFileList, Status(503), Times(1))
		}, []int{429, 503, 200, 200, 200}},
		{"nth counts requests another rule answered", func(s *Script) {
			s.Add(RouteFileList, Status(500), Nth(3)).Add(RouteFileList, tr, Nth(3))
		}, []int{200, 200, 500, 200, 200}},
		{"first rule wins", func(s *Script) {
			s.Add(RouteFileList, Status(500), Nth(2)).Add(RouteFileList, tr)
		}, []int{429, 500, 429, 429, 429}},
		{"other route", func(s *Script) { s.Add(RouteFileUpload, tr) }, []int{200, 200, 200, 200, 200}},
		{"any route", func(s *Script) { s.Add(RouteAny, tr, Nth(5)) }, []int{200, 200, 200, 200, 429}},
		{"any route, other method", func(s *Script) { s.Add(RouteAny, tr, Method("post")) }, []int{200, 200, 200, 200, 200}},
		{"any route, this method", func(s *Script) { s.Add(RouteAny, tr, Method("get"), Times(1)) }, []int{429, 200, 200, 200, 200}},
		{"path prefix matches", func(s *Script) { s.Add(RouteFileList, tr, MatchPath("/fi"), Nth(2)) }, []int{200, 429, 200, 200, 200}},
		{"path prefix does not", func(s *Script) { s.Add(RouteFileList, tr, MatchPath("/indexes/")) }, []int{200, 200, 200, 200, 200}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			tc.rules(s.Script())
			assert.Equal(t, tc.want, statuses(t, s, "GET", "/files", 5))
		})
	}
}

func TestRulesAddedLaterCountFromThen(t *testing.T) {
	s := newServer(t)
	assert.Equal(t, []int{200, 200}, statuses(t, s, "GET", "/files", 2))
	s.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(1)), Nth(2))
	assert.Equal(t, []int{200, 429, 200}, statuses(t, s, "GET", "/files", 3))
	assert.Equal(t, 5, s.Requests()[4].Ordinal, "the ledger's ordinal counts from the start")
	assert.Equal(t, 0, s.Requests()[3].Rule)
	assert.Equal(t, -1, s.Requests()[4].Rule)
}

func TestScriptAddPanics(t *testing.T) {
	tr := Throttle(RetryAfterSeconds(1))
	for name, f := range map[string]func(){
		"unknown route":    func() { (&Script{}).Add("serch.put", tr) },
		"empty route":      func() { (&Script{}).Add("", tr) },
		"nth 0":            func() { (&Script{}).Add(RouteFileList, tr, Nth(0)) },
		"times 0":          func() { (&Script{}).Add(RouteFileList, tr, Times(0)) },
		"always and times": func() { (&Script{}).Add(RouteFileList, tr, Times(1), Always()) },
		"method mismatch":  func() { (&Script{}).Add(RouteFileList, tr, Method("POST")) },
		"bad method":       func() { (&Script{}).Add(RouteAny, tr, Method("G T")) },
		"bad prefix":       func() { (&Script{}).Add(RouteAny, tr, MatchPath("files")) },
		"zero fault":       func() { (&Script{}).Add(RouteAny, Fault{}) },
		"NewScript":        func() { NewScript(Rule{Route: "nope", Fault: tr}) },
	} {
		assert.Panics(t, f, name)
	}
	var s Script
	assert.NotPanics(t, func() { s.Add(RouteOther, ConnectionReset(), nil) })
	assert.Equal(t, 1, s.Len())
	var nilScript *Script
	assert.Equal(t, 0, nilScript.Len())
	assert.Nil(t, nilScript.Rules())
}

func TestRuleString(t *testing.T) {
	s := NewScript(
		Rule{Route: RouteBlobGet, Method: "GET", PathPrefix: "/acct/c/", Nth: 2, Times: 3, Fault: SlowBody(1, 0)},
		Rule{Route: RouteFileUpload, Always: true, Fault: Throttle(RetryAfterMissing()).WithBodySize(10)},
	)
	var got []string
	for _, r := range s.Rules() {
		got = append(got, r.String())
	}
	assert.Equal(t, []string{
		`blob.get GET path="/acct/c/" nth=2 times=3 -> slow_body(1B/0s)`,
		`file.upload always -> 429 retry-after=missing body=10B`,
	}, got)
	assert.Equal(t, fmt.Sprint(got[0]), s.Rules()[0].String())
}
