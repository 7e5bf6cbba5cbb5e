// Command timeline draws a samples file of a rate scenario as an SVG
// picture: one lane per contender, the requests the server saw per bin of
// time (100 ms by default), its 429s in red on top, and the lane's totals
// as a caption. A contender run by several processes (the fleet scenario)
// has one lane, its processes in shades of blue.
//
// The samples file is CSV: a header line "contender,proc,at_ms,status",
// then one line per request the server saw: the contender, the process
// (1-based), the arrival in milliseconds after the run's start, the status
// answered (0 for a reset). Scenario (e) writes one with TIMELINE_E=path
// (bench/ratelimit_bench_test.go), the fleet with TIMELINE_FLEET=path
// (integration/fleet_test.go). The picture depends on the file and the
// flags only.
//
//	go run ./cmd/timeline -in timeline-e.csv -out timeline-e.svg \
//		-title "(e) 500 × 10 pages against TokenBucket(200/s, 50)" -rate 200 -ymax 60 \
//		-lanes rr-shared,rr-budget,retryablehttp,azcore,failsafe,bare
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "", "samples file (required)")
	out := flag.String("out", "", "SVG to write (required)")
	title := flag.String("title", "", "the picture's title")
	width := flag.Duration("bin", 100*time.Millisecond, "a bin's width")
	ymax := flag.Int("ymax", 0, "requests per bin at the top of a lane (0: the largest bin)")
	rate := flag.Float64("rate", 0, "the server's rate per second, drawn as a dashed line (0: none)")
	order := flag.String("lanes", "", "comma-separated contenders to draw first, in this order; the others follow in the file's order")
	flag.Parse()
	if *in == "" || *out == "" || *width <= 0 {
		fmt.Fprintln(os.Stderr, "timeline: -in and -out are required, -bin must be positive")
		os.Exit(2)
	}
	if err := run(*in, *out, chart{title: *title, width: *width, ymax: *ymax, rate: *rate}, *order); err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
}

func run(in, out string, c chart, order string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	samples, err := readSamples(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	var names []string
	if order != "" {
		names = strings.Split(order, ",")
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := writeSVG(w, c, binLanes(samples, c.width, names)); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
