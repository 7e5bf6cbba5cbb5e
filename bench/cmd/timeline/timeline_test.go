package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/small.svg")

// small is a samples file of two contenders: "one" in one process with a
// 429 at exactly 100 ms (the edge of bins 0 and 1) and a burst of 5 in bin
// 3; "fleet" in two processes, and a reset (status 0) in bin 2.
const small = `contender,proc,at_ms,status
one,1,0,200
one,1,99.999,200
one,1,100,429
one,1,100.001,200
one,1,300,200
one,1,310,429
one,1,320,429
one,1,330,200
one,1,399.9,200
fleet,2,5.5,200
fleet,1,50,429
fleet,1,150,200
fleet,2,199,200
fleet,2,250,0
fleet,1,-1,200
`

func TestBinLanes(t *testing.T) {
	samples, err := readSamples(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	lanes := binLanes(samples, 100*time.Millisecond, []string{"fleet", "absent"})
	var got []string
	for _, l := range lanes {
		s := fmt.Sprintf("%s procs=%d requests=%d 429s=%d last=%v:", l.name, l.procs, l.requests, l.throttled, l.last)
		for _, b := range l.bins {
			s += fmt.Sprintf(" %v+%d", b.ok, b.throttled)
		}
		got = append(got, s)
	}
	want := []string{
		// The arrival at -1 ms (another process's clock) counts in bin 0.
		"fleet procs=2 requests=6 429s=1 last=250ms: [1 1]+1 [1 1]+0 [0 1]+0 [0 0]+0",
		"absent procs=0 requests=0 429s=0 last=0s: [0]+0 [0]+0 [0]+0 [0]+0",
		// 100 ms is bin 1's first instant: the 429 there is bin 1's.
		"one procs=1 requests=9 429s=3 last=399.9ms: [2]+0 [1]+1 [0]+0 [3]+2",
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
}

func TestReadSamplesRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"contender,proc,at,status\n",
		"contender,proc,at_ms,status\none,0,1,200\n",
		"contender,proc,at_ms,status\none,1,x,200\n",
		"contender,proc,at_ms,status\n,1,1,200\n",
		"contender,proc,at_ms,status\none,1,1\n",
		"contender,proc,at_ms,status\none,1,NaN,200\n",
	} {
		if s, err := readSamples(strings.NewReader(in)); err == nil {
			t.Errorf("readSamples(%q) = %v, want an error", in, s)
		}
	}
}

// TestSVGGolden draws small with a ymax of 4 (bin 3 of "one", 5 requests,
// is scaled down to the top and labelled) and a rate line, and compares the bytes with
// testdata/small.svg (go test -update rewrites it; look at it before you
// commit it).
func TestSVGGolden(t *testing.T) {
	samples, err := readSamples(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	c := chart{title: "small <test>", width: 100 * time.Millisecond, ymax: 4, rate: 20}
	var b bytes.Buffer
	if err := writeSVG(&b, c, binLanes(samples, c.width, []string{"one"})); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "small.svg")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("writeSVG differs from %s; got:\n%s", golden, b.Bytes())
	}
}

func TestSteps(t *testing.T) {
	for _, tc := range []struct {
		h    []float64
		want string
	}{
		{[]float64{0, 0}, ""},
		{[]float64{2, 2, 0, 1.25}, "M10 50V48H14V50H16V48.8H18V50Z"},
		{[]float64{0, 3}, "M12 50V47H14V50Z"},
		{[]float64{1, 0, 0}, "M10 50V49H12V50Z"},
	} {
		if got := steps(tc.h, 10, 50, 2); got != tc.want {
			t.Errorf("steps(%v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

func TestTickStepAndThousands(t *testing.T) {
	for span, want := range map[time.Duration]time.Duration{
		400 * time.Millisecond: 100 * time.Millisecond,
		2 * time.Second:        200 * time.Millisecond,
		12 * time.Second:       time.Second,
		31 * time.Second:       5 * time.Second,
		100 * time.Second:      10 * time.Second,
	} {
		if got := tickStep(span); got != want {
			t.Errorf("tickStep(%v) = %v, want %v", span, got, want)
		}
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 5446: "5,446", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestNoSamples: a file with the header alone draws an empty lane for a
// contender named in -lanes.
func TestNoSamples(t *testing.T) {
	samples, err := readSamples(strings.NewReader("contender,proc,at_ms,status\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeSVG(&b, chart{width: 100 * time.Millisecond}, binLanes(samples, 100*time.Millisecond, []string{"a"})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte(">a: 0 requests, 0 429s, last request at 0 s<")) || bytes.Contains(b.Bytes(), []byte("<path")) {
		t.Errorf("got:\n%s", b.Bytes())
	}
}

// TestRun writes the file run is given.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "s.csv"), filepath.Join(dir, "s.svg")
	if err := os.WriteFile(in, []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out, chart{title: "t", width: 100 * time.Millisecond}, "one,fleet"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The largest bin (5) is the top: nothing is labelled as cut.
	if !bytes.HasPrefix(got, []byte("<svg ")) || !bytes.Contains(got, []byte(">one: 9 requests, 3 429s, last request at 0.4 s<")) || bytes.Contains(got, []byte(`font-size="10"`)) {
		t.Errorf("run wrote:\n%s", got)
	}
}
