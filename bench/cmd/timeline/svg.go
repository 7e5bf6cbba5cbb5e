package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// chart is what a picture shows besides its lanes.
type chart struct {
	title string
	width time.Duration // a bin's width
	// ymax is the count at the top of every lane; 0 means the largest bin
	// of all lanes. A bin above it is drawn to the top, its parts scaled
	// down together (so that the 429s' share shows), and labelled with its
	// count where there is room.
	ymax int
	// rate is the server's rate per second, drawn in every lane as a
	// dashed line at rate·width requests per bin; 0 draws none.
	rate float64
}

// Layout, in pixels.
const (
	left      = 56  // the lanes' left edge; room for the count labels
	right     = 24  // past the lanes' right edge
	plotWidth = 900 // at most: a bin is a whole number of pixels wide
	laneTop   = 58  // the first lane's caption
	caption   = 18  // a lane's caption above its plot
	plotH     = 72  // a lane's plot
	laneGap   = 16  // below a plot
	axisH     = 36  // the time axis below the last lane
)

// Colours: answered requests in blue (a shade per process), 429s in red.
var (
	procShades = []string{"#1f4e79", "#2e75b6", "#6fa8dc", "#a9cbe8"}
	oneProc    = "#2e75b6"
	red        = "#d62728"
)

// writeSVG draws lanes as an SVG picture: per lane a stacked histogram,
// from the bottom up the requests not answered 429 of each process (a
// shade each) and the lane's 429s on top, under a caption with the lane's
// totals; below the lanes a time axis in seconds. The output depends on
// c and lanes only.
func writeSVG(w io.Writer, c chart, lanes []*lane) error {
	nbins, procs, most := 1, 1, 0
	for _, l := range lanes {
		nbins = max(nbins, len(l.bins))
		procs = max(procs, l.procs)
		for _, b := range l.bins {
			most = max(most, b.total())
		}
	}
	ymax := c.ymax
	if ymax <= 0 {
		ymax = max(most, 1)
	}
	clipped := most > ymax
	px := max(1, plotWidth/nbins) // a bin's width
	width := left + nbins*px + right
	height := laneTop + len(lanes)*(caption+plotH+laneGap) + axisH
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	path := func(fill, d string) {
		if d != "" {
			p(`<path fill="%s" d="%s"/>`+"\n", fill, d)
		}
	}
	xAt := func(t time.Duration) string { return num(left + t.Seconds()/c.width.Seconds()*float64(px)) }

	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	p(`<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.title))

	// Legend.
	x := left
	item := func(fill, label string) {
		p(`<rect x="%d" y="32" width="10" height="10" fill="%s"/><text x="%d" y="41">%s</text>`+"\n", x, fill, x+14, esc(label))
		x += 14 + 7*len(label) + 16
	}
	if procs == 1 {
		item(oneProc, "answered (not 429)")
	} else {
		for i := range procs {
			item(procShades[i%len(procShades)], fmt.Sprintf("process %d", i+1))
		}
	}
	item(red, "429")
	perBin := c.rate * c.width.Seconds()
	drawRate := c.rate > 0 && perBin <= float64(ymax)
	if drawRate {
		label := fmt.Sprintf("the server's rate: %s per %s", num(perBin), ms(c.width))
		p(`<line x1="%d" y1="37" x2="%d" y2="37" stroke="black" stroke-dasharray="4 3"/><text x="%d" y="41">%s</text>`+"\n", x, x+18, x+22, esc(label))
	}

	// Time grid and axis.
	span := time.Duration(nbins) * c.width
	step := tickStep(span)
	bottom := height - axisH
	p(`<g stroke="#ddd">`)
	for t := time.Duration(0); t <= span; t += step {
		p(`<line x1="%s" y1="%d" x2="%s" y2="%d"/>`, xAt(t), laneTop+caption, xAt(t), bottom)
	}
	p("</g>\n")
	p(`<g text-anchor="middle">`)
	for t := time.Duration(0); t <= span; t += step {
		p(`<text x="%s" y="%d">%s</text>`, xAt(t), bottom+14, num(t.Seconds()))
	}
	p("</g>\n")
	note := fmt.Sprintf("seconds after the start (bars: requests per %s", ms(c.width))
	if clipped {
		note += fmt.Sprintf("; a number: a bar's requests above %d, the bar scaled down", ymax)
	}
	p(`<text x="%d" y="%d" text-anchor="middle">%s)</text>`+"\n", left+nbins*px/2, bottom+30, note)

	for i, l := range lanes {
		top := laneTop + i*(caption+plotH+laneGap)
		base := top + caption + plotH
		capt := fmt.Sprintf("%s: %s requests, %s 429s, last request at %s s", l.name, thousands(l.requests), thousands(l.throttled), num(l.last.Seconds()))
		if l.procs > 1 {
			capt += fmt.Sprintf(" (%d processes)", l.procs)
		}
		p(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, top+13, esc(capt))
		p(`<text x="%d" y="%d" text-anchor="end">%d</text><text x="%d" y="%d" text-anchor="end">0</text>`+"\n", left-4, base-plotH+10, ymax, left-4, base)
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, base, left+nbins*px, base)

		// Painter's order: the whole stack in red, then the answered
		// requests of processes 1..n, then of 1..n-1, and so on.
		scale := make([]float64, len(l.bins)) // pixels per request
		stack := make([]float64, len(l.bins))
		for j, b := range l.bins {
			scale[j] = plotH / float64(max(ymax, b.total()))
			stack[j] = float64(b.total()) * scale[j]
		}
		path(red, steps(stack, left, base, px))
		for k := max(l.procs, 1); k >= 1; k-- {
			for j, b := range l.bins {
				n := 0
				for _, c := range b.ok[:k] {
					n += c
				}
				stack[j] = float64(n) * scale[j]
			}
			fill := oneProc
			if l.procs > 1 {
				fill = procShades[(k-1)%len(procShades)]
			}
			path(fill, steps(stack, left, base, px))
		}
		if drawRate {
			y := float64(base) - perBin*plotH/float64(ymax)
			p(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="black" stroke-dasharray="4 3"/>`+"\n", left, num(y), left+nbins*px, num(y))
		}
		// Label each bin above ymax with its count, right of the bar (left
		// of it near the right edge), unless the label would overlap the
		// one before.
		labelled := 0 // the right end of the last label
		for j, b := range l.bins {
			if b.total() <= ymax {
				continue
			}
			label := thousands(b.total())
			x := left + (j+1)*px + 2
			if x+labelW(label) > left+nbins*px {
				x = left + j*px - 2 - labelW(label)
			}
			if x < labelled+4 {
				continue
			}
			p(`<text x="%d" y="%d" font-size="10">%s</text>`+"\n", x, base-plotH+9, label)
			labelled = x + labelW(label)
		}
	}
	p("</svg>\n")
	return bw.Flush()
}

// steps is the outline of a histogram whose bin j, px wide, stands h[j]
// above base: one path, a vertical move only where the height changes.
// The empty path for a histogram of zeros.
func steps(h []float64, x0, base, px int) string {
	var b strings.Builder
	y := float64(base)
	for j, hj := range h {
		if ny := float64(base) - hj; ny != y {
			if b.Len() == 0 {
				fmt.Fprintf(&b, "M%d %d", x0+j*px, base)
			} else {
				fmt.Fprintf(&b, "H%d", x0+j*px)
			}
			fmt.Fprintf(&b, "V%s", num(ny))
			y = ny
		}
	}
	switch {
	case b.Len() == 0:
	case y != float64(base):
		fmt.Fprintf(&b, "H%dV%dZ", x0+len(h)*px, base)
	default:
		b.WriteString("Z")
	}
	return b.String()
}

// tickStep is the time between the axis's ticks: the shortest of 0.1, 0.2,
// 0.5, 1, 2, 5, ... seconds that gives at most 12 steps over span.
func tickStep(span time.Duration) time.Duration {
	for step := 100 * time.Millisecond; ; step *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if span <= 12*m*step {
				return m * step
			}
		}
	}
}

// labelW is about the width of a label of font-size 10.
func labelW(s string) int { return 6 * len(s) }

// ms is d in milliseconds: "100 ms".
func ms(d time.Duration) string { return num(float64(d)/float64(time.Millisecond)) + " ms" }

// num is f with at most one decimal.
func num(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

// thousands is n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

var esc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace
