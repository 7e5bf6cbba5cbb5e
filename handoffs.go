package readrecovery

import (
	"cmp"
	"slices"
	"time"
)

// This file is the list of hand-offs a scope's room counts in flight
// (room.go), oldest first. Behind a soft cap (room.hasRoom) a busy scope's
// list holds every request in flight, a thousand and more in scenario 3,
// and their answers come back mostly in the order the requests went:
// taking the oldest out of a plain slice moved all the others, under the
// lock every scope shares (R97: nothing under it grows with history; the
// copy was 0.8 % of scenario 3's CPU with rr-shared). Here an answer
// finds its entry by binary search and moves only the shorter side.

// handoff is a request handed over: its number and when.
type handoff struct {
	n  uint64
	at time.Time
}

// handoffs is a room's hand-offs in flight, in hand-off order (numbers
// rising, as room.enter hands them out): list[head:]. The slots before
// head are taken again when the list would otherwise grow; slots out of
// the list are not cleared (a hand-off holds no memory but a Location,
// which lives as long as the process). The zero value is empty.
type handoffs struct {
	list []handoff
	head int
}

// all returns the hand-offs, oldest first; writes to them stay in the list.
func (q *handoffs) all() []handoff { return q.list[q.head:] }

// len returns how many hand-offs the list holds.
func (q *handoffs) len() int { return len(q.list) - q.head }

// push adds h, numbered above every hand-off in the list. A full list
// whose front has at least half of it free moves down instead of growing:
// it then has that many pushes before it moves again.
func (q *handoffs) push(h handoff) {
	if len(q.list) == cap(q.list) && 2*q.head >= len(q.list) {
		n := copy(q.list, q.list[q.head:])
		q.list, q.head = q.list[:n], 0
	}
	q.list = append(q.list, h)
}

// popOldest removes the oldest hand-off; the list is not empty.
func (q *handoffs) popOldest() {
	q.head++
}

// take removes the hand-off numbered n and returns it; false when the
// list holds none (it was accepted already).
func (q *handoffs) take(n uint64) (handoff, bool) {
	s := q.all()
	if len(s) == 0 || n < s[0].n {
		return handoff{}, false
	}
	// The numbers rise by one at least from each hand-off to the next, so
	// n is at most n - s[0].n places in: for the oldest few, where most
	// answers fall, the search is over a few entries, not the whole list.
	within := s[:min(n-s[0].n, uint64(len(s)-1))+1]
	i, ok := slices.BinarySearchFunc(within, n, func(h handoff, n uint64) int { return cmp.Compare(h.n, n) })
	if !ok {
		return handoff{}, false
	}
	h := s[i]
	if i < len(s)/2 {
		copy(s[1:i+1], s[:i]) // the older ones move up one
		q.popOldest()
		return h, true
	}
	copy(s[i:], s[i+1:])
	q.list = q.list[:len(q.list)-1]
	return h, true
}
