package fakeserver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Route names: a request's route comes from its method and path (see the
// package documentation).
const (
	RouteSearchPut  = "search.put"  // PUT /indexes/{name}
	RouteSearchGet  = "search.get"  // GET /indexes/{name}
	RouteFileUpload = "file.upload" // POST /files
	RouteFileList   = "file.list"   // GET /files
	RouteBlobPut    = "blob.put"    // PUT /{container}/{blob}
	RouteBlobGet    = "blob.get"    // GET /{container}/{blob}
	RouteOther      = "other"       // anything else
	RouteAny        = "*"           // every request (rules only)
)

// routeNames are the names a rule may use.
var routeNames = []string{RouteSearchPut, RouteSearchGet, RouteFileUpload, RouteFileList,
	RouteBlobPut, RouteBlobGet, RouteOther, RouteAny}

// routeMethod is the one method each named route answers (openai.file.get
// answers GET and HEAD).
var routeMethod = map[string]string{
	RouteSearchPut: "PUT", RouteSearchGet: "GET", RouteFileUpload: "POST", RouteFileList: "GET",
	RouteBlobPut: "PUT", RouteBlobGet: "GET", RouteOpenAIFileUpload: "POST", RouteOpenAIFileList: "GET",
	RouteOpenAIFileDelete: "DELETE", RouteOpenAIBatchCreate: "POST", RouteOpenAIBatchGet: "GET",
}

// Rule is one line of a [Script]: which requests it matches, when it fires,
// and the [Fault] it injects. Rules are made by [Script.Add] and
// [LoadScript]; [Script.Rules] returns copies.
type Rule struct {
	// Route is a route name or "*".
	Route string
	// Method, when not empty, must equal the request's method.
	Method string
	// PathPrefix, when not empty, must prefix the request's decoded path.
	PathPrefix string
	// Nth, when above 0, is the 1-based ordinal of the first matching
	// request the rule fires on. Alone, it fires on that request only.
	Nth int
	// Times, when above 0, is how many times the rule fires at most, on
	// matching requests from the Nth (or the first) on.
	Times int
	// Always makes the rule fire on every matching request from the Nth (or
	// the first) on. A rule with neither Nth nor Times fires always too.
	Always bool
	// Window, when its Duration is above 0, makes the rule fire only on
	// requests that arrive inside it ([Window]).
	Window TimeWindow
	// Bucket, when its Rate is above 0, makes the rule fire only on
	// requests its token bucket has no token for ([TokenBucket]).
	Bucket Bucket
	// Fault is what the rule injects.
	Fault Fault
}

// String describes the rule: `file.list GET nth=3 -> 429 retry-after=seconds(1)`.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Route)
	if r.Method != "" {
		b.WriteString(" " + r.Method)
	}
	if r.PathPrefix != "" {
		fmt.Fprintf(&b, " path=%q", r.PathPrefix)
	}
	if r.Nth > 0 {
		fmt.Fprintf(&b, " nth=%d", r.Nth)
	}
	if r.Times > 0 {
		fmt.Fprintf(&b, " times=%d", r.Times)
	}
	if r.Always {
		b.WriteString(" always")
	}
	if r.Window.Duration > 0 {
		b.WriteString(" " + r.Window.String())
	}
	if r.Bucket.Rate > 0 {
		b.WriteString(" " + r.Bucket.String())
	}
	b.WriteString(" -> " + r.Fault.String())
	return b.String()
}

// RuleOption narrows a rule or sets when it fires.
type RuleOption func(*Rule)

// Nth makes the rule fire on the n-th request (1-based) that it matches, and
// on that one only unless [Times] or [Always] is given too: Nth(3) on
// "file.list" is the third inventory page request. It panics when n < 1.
func Nth(n int) RuleOption {
	if n < 1 {
		panic("fakeserver: Nth must be at least 1")
	}
	return func(r *Rule) { r.Nth = n }
}

// Times makes the rule fire on the next n requests it matches (from the
// [Nth] on, when given), then never again. It panics when n < 1.
func Times(n int) RuleOption {
	if n < 1 {
		panic("fakeserver: Times must be at least 1")
	}
	return func(r *Rule) { r.Times = n }
}

// Always makes the rule fire on every request it matches (from the [Nth] on,
// when given): a persistent fault. It is the default of a rule with neither
// Nth nor Times.
func Always() RuleOption { return func(r *Rule) { r.Always = true } }

// Method restricts the rule to one HTTP method (case-insensitive), useful
// with [RouteAny] and [RouteOther].
func Method(m string) RuleOption {
	return func(r *Rule) { r.Method = strings.ToUpper(m) }
}

// MatchPath restricts the rule to requests whose decoded path starts with
// prefix, such as "/devstoreaccount1/checkpoints/" in front of Azurite.
func MatchPath(prefix string) RuleOption {
	return func(r *Rule) { r.PathPrefix = prefix }
}

// validate checks r; on failure it names the field at fault.
func (r *Rule) validate() (field string, err error) {
	m := routeMethod[r.Route] // "" for a route of any method
	switch {
	case !slices.Contains(routeNames, r.Route) && !slices.Contains(openaiRouteNames, r.Route): // openai.go
		return "route", fmt.Errorf("unknown route %q (want one of %s)", r.Route, strings.Join(routeNames, ", "))
	case r.Method != "" && !isToken(r.Method):
		return "method", fmt.Errorf("invalid method %q", r.Method)
	case r.Method != "" && m != "" && m != r.Method:
		return "method", fmt.Errorf("method %s never matches route %s (which is %s only)", r.Method, r.Route, m)
	case r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/"):
		return "path_prefix", fmt.Errorf("path prefix %q must start with /", r.PathPrefix)
	case r.Nth < 0:
		return "nth", errors.New("nth must be at least 1")
	case r.Times < 0:
		return "times", errors.New("times must be at least 1")
	case r.Always && r.Times > 0:
		return "always", errors.New("always and times exclude each other")
	case r.Fault.kind == kindNone:
		return "fault", errors.New("a rule needs a fault")
	}
	return r.validateTimed()
}

func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return c <= ' ' || c >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, c)
	})
}

// Script is an ordered set of fault rules; rules may be added while the
// server runs. Each rule counts the requests it matches from the moment it
// is added, whether or not a rule fires on them; for each request the
// first rule whose conditions hold fires. So two Times(1) rules on one
// route fire on two successive requests, and Nth(3) is the third request
// of its route whatever other rules did. A Script belongs to one [Server];
// the zero Script is empty and ready; it is safe for concurrent use.
type Script struct {
	mu    sync.Mutex
	rules []*ruleState
}

type ruleState struct {
	Rule
	seen  int // matching requests so far
	fired int // times fired
	timedState
}

// NewScript returns a Script holding rules, in order. It panics on an
// invalid rule, as [Script.Add] does.
func NewScript(rules ...Rule) *Script {
	s := &Script{}
	for _, r := range rules {
		s.addRule(r)
	}
	return s
}

// Add appends a rule injecting f on route (a route name or [RouteAny]) when
// its options say so, and returns s. It panics on an unknown route, an
// invalid option or the zero Fault: a typo must not script nothing.
//
//	s.Add(fakeserver.RouteFileList, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Nth(3))
func (s *Script) Add(route string, f Fault, opts ...RuleOption) *Script {
	r := Rule{Route: route, Fault: f}
	for _, o := range opts {
		if o != nil {
			o(&r)
		}
	}
	s.addRule(r)
	return s
}

func (s *Script) addRule(r Rule) {
	if field, err := r.validate(); err != nil {
		panic(fmt.Sprintf("fakeserver: rule %s: %v", field, err))
	}
	s.mu.Lock()
	s.rules = append(s.rules, &ruleState{Rule: r})
	s.mu.Unlock()
}

// Rules returns a copy of the rules, in order.
func (s *Script) Rules() []Rule {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Rule, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.Rule
	}
	return out
}

// Len returns the number of rules.
func (s *Script) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rules)
}

// matchInput is what the rules look at in a request.
type matchInput struct {
	route, method, path string
	now                 time.Time // arrival on the server clock
	account, host       string    // the token buckets' keys
}

// verdict is the script's answer for one request.
type verdict struct {
	fault     Fault // the firing rule's, a remaining Retry-After resolved
	rule      int   // its index; -1 when none fires
	decisions []Decision
}

// match counts the request against every rule and returns the fault of the
// first rule that fires, with its index (-1 when none fires), and the
// decisions of the rules by time or by rate that were asked. Such a rule is
// asked only when its count condition holds and no earlier rule fired: a
// request another rule answered takes no token.
func (s *Script) match(in matchInput) verdict {
	v := verdict{rule: -1}
	if s == nil {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.rules {
		if !r.matches(in.route, in.method, in.path) {
			continue
		}
		r.seen++
		if v.rule >= 0 || !r.due() {
			continue
		}
		var wait time.Duration
		if r.timed() {
			d := r.decide(in)
			d.Rule = i
			v.decisions = append(v.decisions, d)
			if !d.Fired {
				continue
			}
			wait = d.Wait
		}
		r.fired++
		v.rule = i
		v.fault = r.Fault.resolve(wait)
	}
	return v
}

func (r *ruleState) matches(route, method, path string) bool {
	return (r.Route == RouteAny || r.Route == route) && (r.Method == "" || r.Method == method) &&
		strings.HasPrefix(path, r.PathPrefix) // "" prefixes every path
}

// due reports whether the rule fires on the request just counted.
func (r *ruleState) due() bool {
	if r.seen < max(r.Nth, 1) {
		return false
	}
	switch {
	case r.Times > 0:
		return r.fired < r.Times
	case r.Always || r.Nth == 0:
		return true
	default: // Nth alone: exactly that request
		return r.seen == r.Nth
	}
}
