package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// Issue 37: a picture of scenario (e). With TIMELINE_E=path,
// BenchmarkTokenBucket writes every request the fakeserver saw in the
// first op of each contender to path, one CSV line each, for cmd/timeline
// to draw (bench/run does, into timeline-e.svg).

// timelineE is scenario (e)'s samples file, nil without TIMELINE_E.
var timelineE = newTimeline(os.Getenv("TIMELINE_E"))

// timeline is a samples file that gets the first op of each contender of
// this process: the first record truncates it and writes the header, the
// next append.
type timeline struct {
	path string
	mu   sync.Mutex
	done map[string]bool // contenders recorded
}

// newTimeline is a timeline writing to path, nil for "".
func newTimeline(path string) *timeline {
	if path == "" {
		return nil
	}
	return &timeline{path: path, done: map[string]bool{}}
}

// record writes ledger as contender's samples, their times after start,
// unless contender has been recorded already. A nil timeline records
// nothing.
func (tl *timeline) record(contender string, start time.Time, ledger []fakeserver.Request) error {
	if tl == nil {
		return nil
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.done[contender] {
		return nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if len(tl.done) == 0 {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(tl.path, flags, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if len(tl.done) == 0 {
		io.WriteString(w, timelineHeader)
	}
	writeSamples(w, contender, start, ledger)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	tl.done[contender] = true
	return f.Close()
}

// timelineHeader is the first line of a samples file (cmd/timeline).
const timelineHeader = "contender,proc,at_ms,status\n"

// writeSamples writes one line per request of ledger: contender, process
// 1, the arrival in milliseconds after start, the status.
func writeSamples(w io.Writer, contender string, start time.Time, ledger []fakeserver.Request) {
	for _, r := range ledger {
		fmt.Fprintf(w, "%s,1,%.3f,%d\n", contender, float64(r.Arrived.Sub(start))/float64(time.Millisecond), r.Status)
	}
}

// TestTimelineSamples: the samples file of a small run of (e)'s harness
// holds one line per request the server saw, with its status: for bare,
// TestRateScenarioCounts' 4 requests, 2 of them 429. A second record of
// the same contender adds nothing; another contender's is appended.
func TestTimelineSamples(t *testing.T) {
	shape := rateShape{sequences: 3, pages: 1, rate: 0.001, burst: 2}
	specs := map[string]implSpec{}
	for _, s := range implSpecs {
		specs[s.name] = s
	}
	tl := newTimeline(t.TempDir() + "/samples.csv")
	fault := fakeserver.Throttle(fakeserver.RetryAfterRemaining())
	bare := runRateScenario(t, specs["bare"], fault, shape)
	if err := tl.record("bare", bare.start, bare.ledger); err != nil {
		t.Fatal(err)
	}
	if err := tl.record("bare", bare.start, bare.ledger); err != nil {
		t.Fatal(err)
	}
	shared := runRateScenario(t, specs["rr-shared"], fault, shape)
	if err := tl.record("rr-shared", shared.start, shared.ledger); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(tl.path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[0]+"\n" != timelineHeader {
		t.Fatalf("first line %q, want the header", lines[0])
	}
	seen := map[string]int{}
	for _, l := range lines[1:] {
		var name string
		var proc, status int
		var ms float64
		if _, err := fmt.Sscanf(strings.ReplaceAll(l, ",", " "), "%s %d %f %d", &name, &proc, &ms, &status); err != nil || proc != 1 || ms < 0 {
			t.Fatalf("line %q: %v", l, err)
		}
		seen[fmt.Sprintf("%s %d", name, status)]++
	}
	got := fmt.Sprint(len(lines)-1, seen)
	want := fmt.Sprint(bare.requests+shared.requests, map[string]int{
		"bare 200": 2, "bare 429": 2, "rr-shared 200": 2, "rr-shared 429": 1})
	if got != want || bare.requests != 4 || shared.requests != 3 {
		t.Errorf("samples %s, want %s (the servers saw %d and %d requests)", got, want, bare.requests, shared.requests)
	}

	var nilTL *timeline
	if err := nilTL.record("bare", bare.start, bare.ledger); err != nil {
		t.Errorf("a nil timeline: %v", err)
	}
}
