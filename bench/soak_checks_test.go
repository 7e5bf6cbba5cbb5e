package bench

import (
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// The soak's checks, proven on ledgers made by hand: each case is a
// ledger as a fakeserver would record it and what the callers noted, and
// the exact violations (by category) and findings the checks must report.
// This is what a plain `go test` runs in place of the minute-long soak.

// ledgerReq is one hand-made ledger entry: at is the arrival after t0.
type ledgerReq struct {
	key    string
	method string
	route  string
	at     time.Duration
	status int
	rule   int // index into the case's rules, -1 for none
}

// callerReq is what the caller noted of a key: issued and done after t0.
type callerReq struct {
	at, done time.Duration
	status   int
}

var (
	ra0         = fakeserver.Throttle(fakeserver.RetryAfterSeconds(0))
	ra1         = fakeserver.Throttle(fakeserver.RetryAfterSeconds(1))
	ra2         = fakeserver.Throttle(fakeserver.RetryAfterSeconds(2))
	raOversized = fakeserver.Throttle(fakeserver.RetryAfterOversized(200))
)

func TestSoakChecksConcurrent(t *testing.T) {
	get, put := http.MethodGet, http.MethodPut
	blob, sput, sget := fakeserver.RouteBlobGet, fakeserver.RouteSearchPut, fakeserver.RouteSearchGet
	ms := time.Millisecond
	cases := []struct {
		name       string
		maxReq     int
		reported   int // Report.Requests
		faults     []fakeserver.Fault
		ledger     []ledgerReq
		caller     map[string]callerReq
		violations map[string]int
		findings   map[string]int
	}{{
		name: "readbacks after a write 429 all wait for its not-before", reported: 3,
		faults: []fakeserver.Fault{ra1},
		ledger: []ledgerReq{
			{"rq0001", put, sput, 0, 429, 0},
			{"rq0002", get, sget, 1000 * ms, 200, -1},
			{"rq0003", get, sget, 1001 * ms, 200, -1},
		},
		caller: map[string]callerReq{
			"rq0001": {0, 2 * ms, 429}, "rq0002": {3 * ms, 1002 * ms, 200}, "rq0003": {3 * ms, 1002 * ms, 200},
		},
		findings: map[string]int{"windows opened (ledger)": 1, "ledger waits": 1},
	}, {
		name: "a readback issued after the write 429 arrives inside the window", reported: 3,
		faults: []fakeserver.Fault{ra1},
		ledger: []ledgerReq{
			{"rq0001", put, sput, 0, 429, 0},
			{"rq0003", get, sget, 5 * ms, 200, -1},
			{"rq0002", get, sget, 1000 * ms, 200, -1},
		},
		caller: map[string]callerReq{
			"rq0001": {0, 2 * ms, 429}, "rq0002": {3 * ms, 1002 * ms, 200}, "rq0003": {3 * ms, 6 * ms, 200},
		},
		violations: map[string]int{"request inside the window (R42) [t]": 1},
		findings:   map[string]int{"windows opened (ledger)": 1, "ledger waits": 1},
	}, {
		name: "net/http's replay after a reset is a finding, not a violation", reported: 1,
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 0, -1},
			{"rq0001", get, blob, 1 * ms, 200, -1},
		},
		caller:   map[string]callerReq{"rq0001": {0, 2 * ms, 200}},
		findings: map[string]int{nethttpReplay: 1},
	}, {
		name: "a second send after a 200 is a re-send the Budget never counted", reported: 1,
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 200, -1},
			{"rq0001", get, blob, 1 * ms, 200, -1},
		},
		caller: map[string]callerReq{"rq0001": {0, 2 * ms, 200}},
		violations: map[string]int{
			"server saw more than the Budget counted [t]": 1,
			"re-sent after an answer other than 429 [t]":  1,
		},
	}, {
		name: "a PUT re-sent after its 429", reported: 2,
		faults: []fakeserver.Fault{ra0},
		ledger: []ledgerReq{
			{"rq0001", put, sput, 0, 429, 0},
			{"rq0001", put, sput, 10 * ms, 201, -1},
		},
		caller:     map[string]callerReq{"rq0001": {0, 11 * ms, 201}},
		violations: map[string]int{"mutation re-sent outside the queue route [t]": 1},
		findings:   map[string]int{"windows opened (ledger)": 1, "ledger waits": 1},
	}, {
		name: "a re-send half a second after Retry-After: 1", reported: 2,
		faults: []fakeserver.Fault{ra1},
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 429, 0},
			{"rq0001", get, blob, 500 * ms, 200, -1},
		},
		caller: map[string]callerReq{"rq0001": {0, 501 * ms, 200}},
		violations: map[string]int{
			"re-send before its own not-before [t]": 1,
			"re-send inside the window (R43) [t]":   1,
		},
		findings: map[string]int{"windows opened (ledger)": 1, "ledger waits": 1},
	}, {
		name: "an in-flight 429 joins the window and waits for its own not-before", reported: 4,
		faults: []fakeserver.Fault{ra1, ra2},
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 429, 0},
			{"rq0002", get, blob, 2 * ms, 429, 1},
			{"rq0001", get, blob, 1000 * ms, 200, -1},
			{"rq0002", get, blob, 2002 * ms, 200, -1},
		},
		caller:   map[string]callerReq{"rq0001": {-1 * ms, 1001 * ms, 200}, "rq0002": {-1 * ms, 2003 * ms, 200}},
		findings: map[string]int{"windows opened (ledger)": 1, "ledger waits": 1, "in-flight 429s that joined the window (ledger)": 1},
	}, {
		name: "a 429 after the window re-sent is a second window", reported: 4,
		faults: []fakeserver.Fault{ra0, ra0},
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 429, 0},
			{"rq0001", get, blob, 1 * ms, 200, -1},
			{"rq0002", get, blob, 301 * ms, 429, 1},
			{"rq0002", get, blob, 302 * ms, 200, -1},
		},
		caller:     map[string]callerReq{"rq0001": {0, 2 * ms, 200}, "rq0002": {300 * ms, 303 * ms, 200}},
		violations: map[string]int{"more than one window [t]": 1},
		findings:   map[string]int{"windows opened (ledger)": 1, "ledger waits": 2},
	}, {
		name: "a request issued after an oversized Retry-After stopped the sequence", reported: 2,
		faults: []fakeserver.Fault{raOversized},
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 429, 0},
			{"rq0002", get, blob, 3 * ms, 200, -1},
		},
		caller:     map[string]callerReq{"rq0001": {0, 1 * ms, 0}, "rq0002": {2 * ms, 4 * ms, 200}},
		violations: map[string]int{"request after a stop [t]": 1},
	}, {
		name: "three requests against a limit of two", maxReq: 2, reported: 3,
		ledger: []ledgerReq{
			{"rq0001", get, blob, 0, 200, -1},
			{"rq0002", get, blob, 1 * ms, 200, -1},
			{"rq0003", get, blob, 2 * ms, 200, -1},
		},
		caller:     map[string]callerReq{"rq0001": {0, 1 * ms, 200}, "rq0002": {0, 2 * ms, 200}, "rq0003": {0, 3 * ms, 200}},
		violations: map[string]int{"more requests than the limit [t]": 1},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			rules := make([]fakeserver.Rule, len(tc.faults))
			for i, f := range tc.faults {
				rules[i] = fakeserver.Rule{Route: fakeserver.RouteAny, Fault: f}
			}
			es := make([]fakeserver.Request, len(tc.ledger))
			for i, l := range tc.ledger {
				es[i] = fakeserver.Request{Seq: i + 1, Method: l.method, Route: l.route, Path: "/p", QueryKeys: []string{l.key},
					Arrived: t0.Add(l.at), Status: l.status, Rule: l.rule}
			}
			reqs := map[string]*issued{}
			for k, c := range tc.caller {
				reqs[k] = &issued{at: t0.Add(c.at), done: t0.Add(c.done), status: c.status}
			}
			maxReq := tc.maxReq
			if maxReq == 0 {
				maxReq = readrecovery.MaxSequenceRequests
			}
			s := &soak{tot: newSoakTotals()}
			rec := &seqRecord{kind: "t", maxRequests: maxReq, maxTotal: 10 * time.Second,
				report: readrecovery.Report{Sequence: "case", Requests: tc.reported}}
			s.checkConcurrent(rec, es, rules, reqs)
			checkCounts(t, s, tc.violations, tc.findings)
		})
	}
}

// TestSoakChecksSerial proves the serial sequences' count check: a GET
// replayed by net/http after a reset is a finding; one more request than
// the Budget counted without a reset to explain it is a violation.
func TestSoakChecksSerial(t *testing.T) {
	t0 := time.Now()
	ledger := func(firstStatus int) []fakeserver.Request {
		return []fakeserver.Request{
			{Seq: 1, Method: http.MethodGet, Route: fakeserver.RouteFileList, Path: "/files", Arrived: t0, Status: firstStatus, Rule: -1},
			{Seq: 2, Method: http.MethodGet, Route: fakeserver.RouteFileList, Path: "/files", Arrived: t0.Add(time.Millisecond), Status: 200, Rule: -1},
		}
	}
	rec := &seqRecord{kind: "inventory", maxRequests: 1, maxTotal: 10 * time.Second, serial: true,
		report: readrecovery.Report{Sequence: "inv", Requests: 1}}

	s := &soak{tot: newSoakTotals()}
	s.checkSequence(rec, ledger(0), nil)
	checkCounts(t, s, nil, map[string]int{nethttpReplay: 1, "ledger waits": 0})
	if len(s.replays) != 2 { // the count, and the limit it explains
		t.Errorf("replay findings: %q, want 2", s.replays)
	}

	s = &soak{tot: newSoakTotals()}
	s.checkSequence(rec, ledger(200), nil)
	checkCounts(t, s, map[string]int{
		"server saw more than the Budget counted": 1,
		"more requests than the limit":            1,
	}, map[string]int{"ledger waits": 0})
}

// checkCounts compares the soak's violation categories with want exactly,
// and each finding named in findings with its count.
func checkCounts(t *testing.T, s *soak, want, findings map[string]int) {
	t.Helper()
	got := map[string]int{}
	for k, v := range s.tot.counts {
		if c, ok := strings.CutPrefix(k, "violation "); ok {
			got[c] = v
		}
	}
	if want == nil {
		want = map[string]int{}
	}
	if !maps.Equal(got, want) {
		t.Errorf("violations %v, want %v; messages: %q", got, want, s.violations)
	}
	for k, n := range findings {
		if g := s.tot.counts[k]; g != n {
			t.Errorf("finding %q: %d, want %d", k, g, n)
		}
	}
}
