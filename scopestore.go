package readrecovery

import (
	"context"
	"errors"
	"time"

	"github.com/readrecovery/readrecovery/scopecard"
)

// ScopeStore shares what the processes of a fleet learn about their scopes
// (R104; docs/fleets.md, "Stores"): each scope's card (its not-before and
// learnt pace) and a record per process (its demand and share, live for a
// lease). [DirScopeStore] keeps them in a directory; rrazure.BlobScopeStore
// in a Blob Storage container and rrredis.NewScopeStore in Redis. A store
// is safe for concurrent use by many goroutines and processes; no name it
// files a record under carries a scope's text (each is a digest of it).
type ScopeStore interface {
	// Exchange merges card into the scope's stored card, writes member as the calling
	// process's member record, and returns the merged card, the live members and the
	// store's own time. A zero card merges nothing (a read). ctx bounds the call.
	//
	// The merge is the same in every store: the later NotBefore wins
	// with its RequestID and an earlier or equal one changes nothing
	// (a not-before is never shortened); the later Learnt wins with its
	// Rate and Burst, and an earlier or equal one changes nothing. Times
	// are kept to the millisecond, in UTC. A zero member (no ID) writes no
	// record; a member with an ID replaces that ID's record. A member ID
	// is 1 to 64 letters, digits, '-', '_' or '.'; rates are finite and
	// not negative; times lie within 1970..9999; a request ID is
	// sanitized (letters, digits, '.', '_', ':', '-', at most 128). An
	// argument outside those is refused before the store is touched.
	//
	// Every error wraps [ErrScopeStore]; a cancelled or expired ctx also
	// wraps ctx's error; a nil ctx is refused. A stored card that fails to decode is an error
	// that names the card's file or key (a digest, never the scope), and
	// it is left as it is: it is not overwritten, by the merge or by a
	// zero card, until an operator removes it.
	Exchange(ctx context.Context, scope string, card ScopeCard, member ScopeMember) (ScopeView, error)
}

// ScopeCard is what a fleet knows of one scope. Times are the store's clock, UTC.
// The zero ScopeCard knows nothing: exchanged, it merges nothing.
type ScopeCard struct {
	NotBefore time.Time // merged by maximum: never shortened
	RequestID string    // the sanitized request ID of the 429 that set NotBefore (goes with it)
	Rate      float64   // the learnt rate, requests per second; 0: none learnt
	Burst     float64   // the learnt burst, requests
	Learnt    time.Time // when Rate and Burst were learnt: the latest learnt wins (Rate, Burst, Learnt together)
}

// ScopeMember is one process's record in a scope. The zero ScopeMember
// is no record: an exchange with it writes none.
type ScopeMember struct {
	ID     string    // the process's member ID (random; no host name, no secret)
	Demand float64   // the rate it wants, requests per second
	Share  float64   // the rate it paces at
	Lease  time.Time // live until then (store time); an expired member is not returned
}

// ScopeView is the store's answer to an exchange.
type ScopeView struct {
	Card    ScopeCard
	Members []ScopeMember // the live members (lease after Now), the caller's own included, sorted by ID
	Now     time.Time     // the store's clock at the exchange
	// Resolution is how much of the store's clock Now may have dropped:
	// its true time lies in [Now, Now+Resolution). 0 for a clock read to
	// the millisecond (a directory, Redis's TIME); a second for Blob
	// Storage's Date header. A process converts the times it writes so
	// that they are never early by it.
	Resolution time.Duration
}

// ErrScopeStore is wrapped by every error of a [ScopeStore] of this module
// (the directory, Redis and Blob stores): a refused argument, a store that
// cannot be reached, read or written, a corrupt card, a cancelled context.
// The error's text names the store's own digests, never a scope.
var ErrScopeStore = errors.New("readrecovery: scope store")

// mergeCard is the merge rule of every store (the directory and Blob
// stores through scopecard.Merge, which it is; Redis mirrors it in Lua):
// the later NotBefore wins with its RequestID, the later Learnt with its
// Rate and Burst, an equal or earlier one changes nothing, a zero in
// changes nothing. Pure: times are compared as they are.
func mergeCard(stored, in ScopeCard) ScopeCard {
	return ScopeCard(scopecard.Merge(scopecard.Card(stored), scopecard.Card(in)))
}
