package readrecovery

import (
	"context"
	"net/http"
	"time"

	"github.com/readrecovery/readrecovery/internal/httprule"
)

// This file is the path of the requests a retry layer above the transport
// retries itself (docs/policy.md: caller-retry): [WithCallerRetry] marks
// them, and RoundTrip hands them here when they carry nothing else of the
// policy's. It only calls the room and restriction methods of shared.go
// (take, enterRoom, leaveRoom, leaveQueue, wakeAt, note, succeeded); it
// changes none of them.

// callerRetryKey is the context key of WithCallerRetry's mark.
type callerRetryKey struct{}

// WithCallerRetry returns a copy of ctx whose requests are retried by the
// caller: a retry layer above the transport (openai-go's own retry loop,
// for the rropenai package of the openai module) sends every attempt
// itself, each a new request.
//
// For such a request without a [Budget], a [Journal] or an operation mark
// ([WithOperation]) in its context, the transport never re-sends it and
// never enters it in the repeat guard (a mutation's 429 included: its
// caller's next attempt is not refused). Under [WithSharedRestrictions]
// every attempt is held before it is handed to the base: until its
// scope's known not-before (its place in the scope's paced release, never
// before T), then until the scope has room (docs/policy.md: scope-room);
// its 429 restricts the scope, and its answer grows or halves the room,
// as any other request's. The hold ends with the request's context; a
// place beyond [MaxServerWait] from now, or no room within MaxServerWait,
// returns a *StopError (reason [StopRestricted], errors.Is
// [ErrSequenceStopped]) at once, before any network access: the wait is
// never shortened. Without shared restrictions the mark only keeps the
// request out of the repeat guard.
//
// A request whose context also carries a Budget, a Journal or an operation
// mark is the policy's as before: the mark changes nothing for it. Like
// context.WithValue, it panics on a nil ctx.
func WithCallerRetry(ctx context.Context) context.Context {
	mustParent(ctx)
	return context.WithValue(ctx, callerRetryKey{}, true)
}

// callerRetries reports whether ctx carries WithCallerRetry's mark.
func callerRetries(ctx context.Context) bool {
	v, _ := ctx.Value(callerRetryKey{}).(bool)
	return v
}

// The details of a caller-retried request refused before the network.
const (
	detailCallerCeiling = "the scope's restriction ends beyond the wait ceiling: the caller's attempt was not sent"
	detailCallerRoom    = "the scope had no room for the caller's attempt within the wait ceiling: it was not sent"
)

// passHeld sends a caller-retried request under shared restrictions: held
// at its scope's not-before and room, sent once, its answer noted.
func (c *call) passHeld() (*http.Response, error) {
	t, req := c.t, c.req
	if err := c.holdForCaller(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	c.sentAt = t.clk().Now() // a paced attempt: its release learns from when it went
	resp, err := c.handOver(req)
	switch {
	case err != nil || resp == nil:
		c.leaveRoom(nil, false)
	case httprule.IsThrottled(resp.StatusCode):
		gen := t.noteThrottle(c.scopeOf(), req, resp, c.place)
		// Only now may the scope's next request go: it finds the
		// restriction this 429 set.
		c.leaveRoom(resp, gen != 0)
	default:
		c.leaveRoom(resp, false)
		if c.place != nil && httprule.IsSuccess(resp.StatusCode) {
			t.shared.succeeded(t.clk().Now(), c.sentAt, *c.place)
		}
	}
	return resp, err
}

// holdForCaller waits until the request may be handed over: its place in
// the scope's release is due and the scope has room for it (it then holds
// a place in the room). It returns the refusal, or the context's error.
func (c *call) holdForCaller() error {
	clk := c.t.clk()
	var roomSince time.Time
	for {
		now := clk.Now()
		c.t.shared.sharing.look(c.ctx, c.scopeOf(), now) // the scope store's card (scopeshare.go)
		if f, p, ok := c.t.shared.take(c.scopeOf(), now, c.place); ok {
			c.place = &p
			c.leaveQueue() // a restriction came meanwhile: its place first
			if f.expect.Sub(now) > MaxServerWait {
				c.givePlaceBack()
				return &StopError{Reason: StopRestricted, Detail: detailCallerCeiling, StatusCode: f.plan.status, RequestID: f.plan.requestID}
			}
			if err := clk.Sleep(c.ctx, c.wakeAt(f.until).Sub(now)); err != nil {
				c.givePlaceBack()
				return err
			}
			continue
		} else if p.went {
			// Its place's time came: kept, so that asked again below
			// it still goes at once (as admit keeps it).
			c.place = &p
		}
		if c.enterRoom(&instant{t: now, known: true}) {
			// A 429 leaves the room only once its restriction is noted:
			// a place taken after it finds the restriction, which the
			// take before may have missed.
			f, p, ok := c.t.shared.take(c.scopeOf(), clk.Now(), c.place)
			if !ok {
				if p.went {
					c.place = &p // its place: the release learns from its answer
				}
				return nil
			}
			c.place = &p
			c.giveRoomBack()
			if f.expect.Sub(now) > MaxServerWait {
				c.givePlaceBack()
				return &StopError{Reason: StopRestricted, Detail: detailCallerCeiling, StatusCode: f.plan.status, RequestID: f.plan.requestID}
			}
			continue
		}
		if roomSince.IsZero() {
			roomSince = now
		}
		end := roomSince.Add(MaxServerWait)
		if !now.Before(end) {
			c.leaveQueue()
			c.givePlaceBack()
			return &StopError{Reason: StopRestricted, Detail: detailCallerRoom}
		}
		wake := end
		if !c.room.recheck.IsZero() && c.room.recheck.Before(wake) {
			wake = c.room.recheck // the room changes by itself: ask again then
		}
		if err := c.sleepCallerRoom(wake.Sub(now)); err != nil {
			c.leaveQueue()
			c.givePlaceBack()
			return err
		}
	}
}

// sleepCallerRoom waits at most d for the scope's room to wake the call
// (sleepRoom's wait, without a sequence to stop it): nil when woken or
// when d ran out, else the context's error.
func (c *call) sleepCallerRoom(d time.Duration) error {
	wctx, wake := context.WithCancelCause(c.ctx)
	defer wake(nil)
	unregister, waiting := c.onRoomWake(wake)
	if !waiting {
		return nil
	}
	err := c.t.clk().Sleep(wctx, d)
	unregister()
	if err == nil || context.Cause(wctx) == errRoomFree {
		return nil
	}
	return c.ctx.Err()
}
