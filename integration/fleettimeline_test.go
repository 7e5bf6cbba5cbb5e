package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Issue 37: a picture of the fleet. With TIMELINE_FLEET=path,
// BenchmarkFleetCheckpoints writes every request the proxy saw in the first
// four-process run of each contender to path, one CSV line each, in the
// samples format of bench/cmd/timeline, which draws it (bench/run does,
// into bench/timeline-fleet.svg, from bench/out/timeline-fleet.csv).

// fleetTimeline is the fleet's samples file, nil without TIMELINE_FLEET.
var fleetTimeline = newFleetSamples(os.Getenv("TIMELINE_FLEET"))

// fleetSamples is a samples file that gets the first run of each
// contender of this process: the first record truncates it and writes the
// header, the next append.
type fleetSamples struct {
	path string
	mu   sync.Mutex
	done map[string]bool // contenders recorded
}

// newFleetSamples is a fleetSamples writing to path, nil for "".
func newFleetSamples(path string) *fleetSamples {
	if path == "" {
		return nil
	}
	return &fleetSamples{path: path, done: map[string]bool{}}
}

// record writes res's arrivals as contender's samples unless contender
// has been recorded already. A nil fleetSamples records nothing.
func (fs *fleetSamples) record(contender string, res fleetResult) error {
	if fs == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.done[contender] {
		return nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if len(fs.done) == 0 {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(fs.path, flags, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if len(fs.done) == 0 {
		io.WriteString(w, samplesHeader)
	}
	writeFleetSamples(w, contender, res.arrivals)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	fs.done[contender] = true
	return f.Close()
}

// samplesHeader is the first line of a samples file (bench/cmd/timeline).
const samplesHeader = "contender,proc,at_ms,status\n"

// writeFleetSamples writes one line per request of arrivals (arrivals[m-1]
// are member m's): contender, the member, the arrival in milliseconds
// after the first member's start, the status.
func writeFleetSamples(w io.Writer, contender string, arrivals [][]fleetArrival) {
	for i, as := range arrivals {
		for _, a := range as {
			fmt.Fprintf(w, "%s,%d,%.3f,%d\n", contender, i+1, float64(a.at)/float64(time.Millisecond), a.status)
		}
	}
}
