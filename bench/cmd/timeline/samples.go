package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// header is the first line of a samples file.
var header = []string{"contender", "proc", "at_ms", "status"}

// sample is one request the server saw: its contender, the process that
// sent it (1-based), when it arrived after the run's start, and the status
// it was answered with (0 for a reset).
type sample struct {
	contender string
	proc      int
	at        time.Duration
	status    int
}

// readSamples reads a samples file: the header line, then one line per
// request, "contender,proc,at_ms,status" (at_ms in milliseconds, any
// precision).
func readSamples(r io.Reader) ([]sample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(header)
	first, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if !slices.Equal(first, header) {
		return nil, fmt.Errorf("header %q, want %q", first, header)
	}
	var out []sample
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		proc, err1 := strconv.Atoi(rec[1])
		ms, err2 := strconv.ParseFloat(rec[2], 64)
		status, err3 := strconv.Atoi(rec[3])
		if err := errors.Join(err1, err2, err3); err != nil || rec[0] == "" || proc < 1 || math.IsNaN(ms) || math.IsInf(ms, 0) {
			return nil, fmt.Errorf("line %d: %q: not contender,proc>=1,at_ms,status (%v)", line, rec, err)
		}
		out = append(out, sample{contender: rec[0], proc: proc, at: time.Duration(math.Round(ms * 1e6)), status: status})
	}
}

// lane is one contender's requests in bins of the same width.
type lane struct {
	name      string
	procs     int // the highest process number seen
	requests  int
	throttled int           // requests answered 429
	last      time.Duration // the last arrival
	bins      []bin
}

// bin is a lane's requests in one interval [i·width, (i+1)·width).
type bin struct {
	ok        []int // requests not answered 429, by process (index proc-1)
	throttled int   // requests answered 429, every process
}

// total is every request of the bin.
func (b bin) total() int {
	n := b.throttled
	for _, k := range b.ok {
		n += k
	}
	return n
}

// binLanes groups samples by contender, in the order of order and then of
// first appearance (a contender in order without samples gets an empty
// lane), and counts each lane's requests per bin of width: an arrival at
// exactly i·width falls in bin i; one before 0 (two processes' clocks) in
// bin 0. Every lane gets the same number of bins, as many as the latest
// arrival of all needs.
func binLanes(samples []sample, width time.Duration, order []string) []*lane {
	byName := map[string]*lane{}
	var lanes []*lane
	get := func(name string) *lane {
		l, ok := byName[name]
		if !ok {
			l = &lane{name: name}
			byName[name] = l
			lanes = append(lanes, l)
		}
		return l
	}
	for _, name := range order {
		get(name)
	}
	nbins := 0
	for _, s := range samples {
		l := get(s.contender)
		l.procs = max(l.procs, s.proc)
		l.last = max(l.last, s.at)
		nbins = max(nbins, binOf(s.at, width)+1)
	}
	for _, l := range lanes {
		l.bins = make([]bin, nbins)
		for i := range l.bins {
			l.bins[i].ok = make([]int, max(l.procs, 1))
		}
	}
	for _, s := range samples {
		l := byName[s.contender]
		b := &l.bins[binOf(s.at, width)]
		l.requests++
		if s.status == http.StatusTooManyRequests {
			l.throttled++
			b.throttled++
		} else {
			b.ok[s.proc-1]++
		}
	}
	return lanes
}

func binOf(at, width time.Duration) int { return int(max(at, 0) / width) }
