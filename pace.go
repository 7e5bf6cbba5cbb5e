package readrecovery

import (
	"math"
	"time"
)

// The pace of a release (docs/policy.md: paced-release, release-ramp) is
// the spacing of the places handed out from T on: the release hands
// requests over no faster than the rate the scope's server is known to
// let through, and ramps up while it answers 2xx.
//
//   - Nothing known (no request of the scope passed before its first 429:
//     a closed window): the spacing starts at paceStart and halves with
//     every 2xx of a paced request, as fast as the server accepts; below
//     paceMin it is 0, and the release ends as soon as its places are
//     handed out (a server whose window has closed is not made to wait).
//   - A rate known (requests passed before the 429, or a paced 429 after
//     a ramp): the spacing starts at 1/rate and the rate doubles every
//     paceDouble of paced 2xx (a ramp, not a burst).
//   - A paced 429 ends a cycle: the rate the server let through is
//     learnt from it (pace.learn, with the burst that rate gives the
//     cycle before the ramp: burstAt), the spacing becomes 1/rate, and
//     the rate is held for paceHold from the new T (it settles), then
//     probed with the ramp, so that the pace keeps learning. A rate
//     paceFar times or more below the fastest a ramp of the pace passed
//     (fastest) is held only paceHoldSqueezed: the server let that
//     through, so others sharing it took the rest and may soon be gone.
//     A settled pace spends at most 1/paceSpend of the burst beyond its
//     rate, at twice the rate: from T when the penalty refilled the
//     bucket, and to catch up when it lagged (succeeded, settle).
//
// Always within [paceMin, paceMax], or 0.
const (
	paceStart        = 10 * time.Millisecond
	paceMin          = 100 * time.Microsecond
	paceMax          = time.Second
	paceDouble       = 500 * time.Millisecond // a known rate's ramp: doubled in this much paced time
	paceHold         = 30 * time.Second       // a learnt rate is held this long from its T, then probed
	paceHoldSqueezed = 3 * time.Second        // a learnt rate far below the fastest that passed is held this long
	paceFar          = 3                      // far below: a learnt spacing this many times the fastest, or more
	paceTimes        = 4096                   // the 2xx of a cycle kept for learning (a bounded memory)
	paceSpend        = 4                      // a settled pace spends at most 1/paceSpend of the burst beyond its rate
)

// The modes of a pace.
const (
	paceUnknown uint8 = iota // nothing known: slow start
	paceRamp                 // a rate known, not yet met the limit: the ramp
	paceSettle               // a rate learnt from a paced 429: settled
)

// pace is a release's spacing and what it learned in its current cycle
// (from T, the release's latest start, to the next paced 429).
type pace struct {
	interval time.Duration
	mode     uint8
	burst    float64     // what the server lets through at once, as far as known (0: unknown)
	since    time.Time   // the cycle began then: T
	ok       int         // 2xx of paced requests since then
	times    []time.Time // their arrivals (the first paceTimes)
	cutK     uint64      // a 429 of a ticket before it was in flight at the last slow-down
	// settled: the learnt spacing of a settled pace (paceSettle); owed:
	// the 2xx that spacing accounts for from T to last, the latest send
	// counted, never more than the 2xx there were (a lag beyond is not
	// caught up). A settled pace whose 2xx are fewer than owed and a
	// quarter of the burst goes at twice its rate (succeeded).
	settled time.Duration
	owed    float64
	last    time.Time
	// stragglers: the burst is the room's history, without the requests
	// then in flight that passed later (restrictions.record adds them).
	stragglers bool
	// passed and span: the cycle before the ramp, passed 2xx over span
	// up to its 429. Until a rate is learnt, the burst is what of them a
	// bucket of that rate did not refill: passed - rate*span (burstAt).
	passed float64
	span   time.Duration
	// cycle counts the cycles ended (endCycle): a rate learnt outside the
	// table's lock applies only to the cycle it was learnt from.
	cycle uint64
	// fastest: the shortest spacing at which a paced request of a ramp
	// got a 2xx (0: none yet), kept across cycles.
	fastest time.Duration
	// part: this process's part of its fleet's rate (scopeshare.go), when
	// it is one of several (0: alone, or no store); a slow start goes at
	// it (fleetStart).
	part float64
}

// fleetStart makes a slow start that of one of a fleet, whose part of
// the fleet's rate is part: its spacing starts at paceStart/part and
// grows as its part of one process's slow start (succeeded), so that the
// members released together at a shared not-before start as one process.
func (p *pace) fleetStart(part float64) {
	if p.mode != paceUnknown || part <= 0 || part >= 1 {
		return
	}
	p.part = part
	p.interval = min(time.Duration(float64(p.interval)/part), paceMax)
}

// history is what a scope's room saw before its first 429: ok requests
// passed since first (zero: none).
type history struct {
	ok    int
	first time.Time
}

// newPace is the pace of a release that starts at T = t, after the
// scope's history h up to the 429 received at now: nothing passed, the
// slow start; else the rate it let through, penalty included (the ok
// requests over the time from the first to T), as the start of a ramp,
// and the part of them beyond that rate as the server's burst.
func newPace(now, t time.Time, h history) pace {
	p := pace{interval: paceStart, since: t}
	if h.ok <= 0 || !t.After(h.first) {
		return p
	}
	rate := float64(h.ok) / t.Sub(h.first).Seconds()
	p.mode, p.stragglers = paceRamp, true
	p.interval = intervalOf(rate)
	p.passed, p.span = float64(h.ok), max(now.Sub(h.first), 0)
	p.burst = p.burstAt(rate)
	return p
}

// burstAt is the burst of a bucket that refills at rate and passed what
// the cycle before the ramp passed (the burst is known once a rate is
// learnt: passed 0).
func (p *pace) burstAt(rate float64) float64 {
	if p.passed <= 0 {
		return p.burst
	}
	return max(p.passed-rate*p.span.Seconds(), 1)
}

// intervalOf is the spacing of rate requests per second, within [paceMin,
// paceMax].
func intervalOf(rate float64) time.Duration {
	if rate <= 0 {
		return paceMax
	}
	return min(max(time.Duration(math.Round(float64(time.Second)/rate)), paceMin), paceMax)
}

// succeeded counts the 2xx of a paced request sent at sent, and ramps
// the pace up.
func (p *pace) succeeded(sent time.Time) {
	p.ok++
	if len(p.times) < paceTimes {
		p.times = append(p.times, sent)
	}
	switch p.mode {
	case paceUnknown:
		if p.part > 0 && p.part < 1 {
			// One of a fleet: its slow start grows as its part of one
			// process's would, so that the fleet's grows as one does.
			p.interval = time.Duration(float64(p.interval) * math.Exp2(-p.part))
		} else {
			p.interval /= 2
		}
		if p.interval < paceMin {
			p.interval = 0
		}
	case paceRamp:
		if p.interval > 0 && (p.fastest == 0 || p.interval < p.fastest) {
			p.fastest = p.interval
		}
		p.interval = grown(p.interval, paceDouble)
	case paceSettle:
		if sent.Sub(p.since) >= p.hold() {
			// Held at the learnt rate for paceHold (paceHoldSqueezed
			// far below the fastest that passed): the server may take
			// more now (a process sharing it stopped, its limit rose).
			// The ramp probes upward until a paced 429 teaches the rate
			// again (throttled), so the pace keeps learning.
			p.mode, p.interval = paceRamp, grown(p.settled, paceDouble)
			return
		}
		if sent.After(p.last) {
			p.owed = min(p.owed+float64(sent.Sub(p.last))/float64(p.settled), float64(p.ok))
			p.last = sent
		}
		p.interval = p.settled
		if float64(p.ok) < p.owed+p.burst/paceSpend {
			// Behind the bucket the server was learnt to be: it refilled
			// while the release lagged (its waiters woke late), or it is
			// full at T. Twice the pace, until a quarter of the burst is
			// spent.
			p.interval = max(p.settled/2, paceMin)
		}
	}
}

// hold is how long a settled pace holds its learnt rate from T: paceHold,
// or paceHoldSqueezed when the rate is far below the fastest a ramp of
// the pace passed (the server let that through: others sharing it took
// the rest, and may be gone soon).
func (p *pace) hold() time.Duration {
	if p.fastest > 0 && p.settled >= paceFar*p.fastest {
		return paceHoldSqueezed
	}
	return paceHold
}

// grown is the spacing iv after one more 2xx when the rate doubles in d
// of paced time: each 2xx is one spacing of it.
func grown(iv, d time.Duration) time.Duration {
	if iv == 0 {
		return 0
	}
	return max(time.Duration(float64(iv)*math.Exp2(-float64(iv)/float64(d))), paceMin)
}

// settle makes the pace settled at spacing iv from until (the new T).
// full: the bucket the server was learnt to be is full again at T (it
// refilled the burst over the penalty), so the release starts at twice the
// rate, until a quarter of the burst is spent (succeeded); else it owes
// that quarter already and goes at the rate.
func (p *pace) settle(iv time.Duration, until time.Time, full bool) {
	p.mode, p.settled, p.owed, p.last = paceSettle, iv, 0, until
	p.interval = iv
	switch {
	case !full:
		p.owed = -p.burst / paceSpend
	case p.burst >= paceSpend:
		p.interval = max(iv/2, paceMin)
	}
}

// throttled ends the cycle at a 429 received at now of a paced request,
// the release restarting at until (the new T). (The table asks only for
// a ticket issued after the last slow-down: one due before it was in
// flight then and says nothing new.)
func (p *pace) throttled(now, until time.Time) {
	if l := p.endCycle(now, until); l != nil {
		p.learnt(l, l.rate())
	}
}

// learning is what the end of a cycle learns from: the pace as it was at
// the paced 429 received at now (the cycle's 2xx times its own), with its
// penalty until until. Its rate is computed outside the table's lock
// (restrictions.record): it costs a bisection over up to paceTimes
// arrivals.
type learning struct {
	p          pace
	now, until time.Time
	cycle      uint64 // the pace's cycle it ended: learnt applies to that one only
}

// rate is the rate the cycle teaches (pace.learn).
func (l *learning) rate() float64 { return l.p.learn(l.now, l.until) }

// endCycle ends the cycle at a 429 received at now of a paced request,
// the release restarting at until (the new T). When the cycle needs
// learning (a ramp or a settled pace met the limit), it returns what to
// learn from and settles the pace meanwhile at the cycle's floor (what
// passed per cycle, penalty included: never faster than the rate learnt
// will be); learnt then settles it at the rate learnt. Otherwise it
// returns nil and the pace is final.
func (p *pace) endCycle(now, until time.Time) *learning {
	p.cycle++
	switch {
	case p.ok == 0 && p.mode == paceSettle:
		// Nothing passed since T: still closed; slower.
		p.settle(min(max(2*p.settled, paceStart), paceMax), until, false)
	case p.ok == 0:
		// Nothing passed since T: the server is still closed; slower.
		p.interval = min(max(2*p.interval, paceStart), paceMax)
	case p.mode == paceUnknown:
		// The first cycle that let some through: its rate (penalty
		// included) starts a ramp, and what passed beyond it is the
		// burst.
		cycle, fastest := p.cycle, p.fastest
		*p = newPace(now, until, history{ok: p.ok, first: p.since})
		p.stragglers = false // every one of them was paced
		p.cycle, p.fastest = cycle, fastest
		return nil
	default:
		l := &learning{p: *p, now: now, until: until, cycle: p.cycle}
		p.learnt(l, float64(p.ok)/until.Sub(p.since).Seconds())
		p.since, p.ok, p.times = until, 0, nil // the learning keeps the cycle's times
		return l
	}
	p.since, p.ok, p.times = until, 0, p.times[:0]
	return nil
}

// learnt settles the pace at rate, learnt from l: the burst that rate
// gives the cycle l ended, the spacing 1/rate from l's new T, and twice
// the rate there when the penalty refilled the burst (settle).
func (p *pace) learnt(l *learning, rate float64) {
	p.burst, p.passed, p.span = l.p.burstAt(rate), 0, 0
	iv := intervalOf(rate)
	p.settle(iv, l.until, float64(l.until.Sub(l.now))/float64(iv) >= p.burst)
}

// learn returns the rate the server let through in the cycle that a 429
// received at now ends, with its penalty until until: the least refill
// rate of a token bucket, full at T, that passes every 2xx of the cycle at
// its time (as a bucket server does), at least the cycle's own rate with
// its penalty (what passed over the time from T to until) and at most the
// rate the pace sent at. The bucket's burst is the known one, or, at the
// end of a ramp, the one that rate gives the cycle before (burstAt): a
// burst taken from a rate with its penalty is too large by the refill a
// faster bucket gave in that cycle.
func (p *pace) learn(now, until time.Time) float64 {
	floor := float64(p.ok) / until.Sub(p.since).Seconds()
	ceil := float64(time.Second) / float64(max(p.interval, paceMin))
	if p.ok > len(p.times) || p.burst < 1 || ceil <= floor {
		return floor
	}
	lo, hi := floor, ceil
	if !bucketPasses(p.times, p.since, p.burstAt(hi), hi) {
		return hi
	}
	for range 40 {
		mid := (lo + hi) / 2
		if bucketPasses(p.times, p.since, p.burstAt(mid), mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// bucketPasses reports whether a token bucket of burst tokens, full at
// start and refilled at rate per second, has a token for a request at
// every one of times.
func bucketPasses(times []time.Time, start time.Time, burst, rate float64) bool {
	tokens, last := burst, start
	for _, t := range times {
		if t.After(last) {
			tokens = min(burst, tokens+rate*t.Sub(last).Seconds())
			last = t
		}
		if tokens < 1-1e-9 {
			return false
		}
		tokens--
	}
	return true
}
