package readrecovery

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Scopes is a table of shared restrictions (docs/policy.md:
// shared-restriction, scope-room): for each scope, its not-before, its
// paced release, its room and its quota news. Every Transport given the
// same Scopes with [WithScopes] shares them: a 429 met through one holds
// the requests of the others, and their requests share each scope's room
// (each Transport against its own cap, [WithScopeInFlight]). A Scopes is
// safe for concurrent use. Make one with [NewScopes]; the zero value is
// not usable.
type Scopes struct {
	t *restrictions
}

// NewScopes returns a new, empty table whose requests belong to the scope
// scope names (nil: the request's scheme and host, as
// [WithSharedRestrictions] says).
func NewScopes(scope func(*http.Request) string) *Scopes {
	return newRestrictions(scope).self
}

// WithScopes makes the Transport share restrictions through s, as
// [WithSharedRestrictions] does through a table of its own. A nil s turns
// shared restrictions off, as [WithoutSharedRestrictions] does.
func WithScopes(s *Scopes) Option {
	return optionFunc(func(c *config) {
		c.shared = nil
		if s != nil {
			c.shared = s.t
		}
	})
}

// azureScopes is the process's table keyed by AzureScope.
var azureScopes = sync.OnceValue(func() *Scopes { return NewScopes(AzureScope) })

// AzureScopes returns the process's one table of scopes keyed by
// [AzureScope] (docs/policy.md: azure-scopes). The Azure wirings
// (rrazure's ClientOptions and NewTransport, rropenai's NewTransport and a
// nil transport of its functions) use it, so that every client a program
// builds shares each subscription's, account's and deployment's
// not-before, pace and room, whatever base transport each has.
func AzureScopes() *Scopes { return azureScopes() }

// ScopeState is what a table knows of one scope at the moment of a
// [Scopes.Snapshot] (docs/policy.md: scope-state).
type ScopeState struct {
	// Scope is the scope's name as the scope function gave it
	// (AzureScope's and the default's carry no query, user information or
	// fragment).
	Scope string
	// NotBefore is the scope's restriction T; zero when it is not
	// restricted (or its release has ended).
	NotBefore time.Time
	// Pace is the spacing of the restriction's release: one request per
	// Pace; 0 when it is not restricted or its release goes at once.
	Pace time.Duration
	// Room is the room's in-flight limit; InFlight the requests handed
	// over that count against it (neither answered nor accepted yet);
	// Queued the requests waiting for room.
	Room, InFlight, Queued int
	// Quota is what the server last said remains, less what went since,
	// while that news is fresh; -1 unknown.
	Quota int
	// Throttled counts the 429s answered to the scope's requests that went
	// through its room (those with a Budget or a caller's retry mark).
	Throttled uint64
	// Share is the rate, in requests per second, this process's part of
	// the fleet's learnt rate gives it (docs/policy.md: scope-store), while
	// the card it came from is fresh; 0 when it has none.
	Share float64
	// StoreView is when the scope store last answered an exchange of the
	// scope (this process's clock); zero without a store or an answer.
	StoreView time.Time
}

// Snapshot returns what the table knows of each scope it holds, sorted by
// scope. It reads the table once, under its lock; nothing of it changes
// the table.
func (s *Scopes) Snapshot() []ScopeState {
	t := s.t
	now := time.Now()
	if t.sharing != nil {
		now = t.sharing.now() // a share is the store's: its table's clock
	}
	t.mu.Lock()
	out := make([]ScopeState, 0, len(t.m))
	for scope, e := range t.m {
		st := ScopeState{Scope: scope, Quota: -1}
		if r := e.r; r != nil {
			st.NotBefore, st.Pace = r.until, r.pace.interval
		}
		if r := e.room; r != nil {
			st.Room, st.InFlight, st.Queued, st.Quota, st.Throttled = r.limit, r.inflight, len(r.queue), r.quota, r.throttled
		}
		if e.share.at(now) {
			st.Share = e.share.rate
		}
		out = append(out, st)
	}
	t.mu.Unlock()
	if sh := t.sharing; sh != nil {
		sh.mu.Lock()
		for i := range out {
			if l := sh.looks[out[i].Scope]; l != nil {
				out[i].StoreView = l.seen
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ScopeState) int { return strings.Compare(a.Scope, b.Scope) })
	return out
}
