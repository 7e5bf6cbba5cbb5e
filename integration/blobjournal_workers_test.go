package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// workerRun is one blobworker process of a test: its exit code, its
// stdout lines and, with -store-log, its store ledger.
type workerRun struct {
	code  int
	lines []workerLine
	log   []storeEvent
	cpu   time.Duration // user + system CPU time of the process
}

// hist counts the outcomes of a worker's lines.
func (w workerRun) hist() map[string]int {
	h := map[string]int{}
	for _, l := range w.lines {
		h[l.Outcome]++
	}
	return h
}

// done reports whether the worker exited 0 with its last line "done".
func (w workerRun) done() bool {
	return w.code == 0 && len(w.lines) > 0 && w.lines[len(w.lines)-1].Outcome == "done"
}

// runWorkers runs n blobworker processes at once, worker i (from 1) with
// args(i) and a -store-log of its own in dir, and returns what each did.
func runWorkers(t *testing.T, bin, dir string, n int, args func(i int) []string) []workerRun {
	t.Helper()
	runs := make([]workerRun, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			logPath := filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", i+1))
			a := append(args(i+1), "-worker", fmt.Sprint(i+1), "-store-log", logPath)
			cmd := exec.Command(bin, a...)
			code, out, errb := runProcess(t, cmd)
			runs[i].code = code
			runs[i].cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var l workerLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Errorf("worker %d printed %q", i+1, sc.Text())
					continue
				}
				runs[i].lines = append(runs[i].lines, l)
			}
			if errb.Len() > 0 {
				t.Logf("worker %d stderr: %s", i+1, errb.String())
			}
			runs[i].log = readStoreLog(t, logPath)
		})
	}
	wg.Wait()
	return runs
}

// storeEvent is one line of blobworker's -store-log: an upload attempt
// begins (event "attempt"), or a request of the journal store ended
// (event "store", op create/read/list/remove/properties).
type storeEvent struct {
	Worker  int    `json:"worker"`
	Event   string `json:"event"`
	File    string `json:"file"`
	Op      string `json:"op"`
	Name    string `json:"name"`
	Status  int    `json:"status"`
	StartNs int64  `json:"start_ns"`
	EndNs   int64  `json:"end_ns"`
}

func (e storeEvent) start() time.Time { return time.Unix(0, e.StartNs) }
func (e storeEvent) end() time.Time   { return time.Unix(0, e.EndNs) }

// readStoreLog reads a -store-log; a missing file is an empty ledger (a
// worker killed before its first request). A torn last line (a kill in
// the middle of a write) is dropped.
func readStoreLog(t testing.TB, path string) []storeEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []storeEvent
	for i, ln := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if ln == "" {
			continue
		}
		var e storeEvent
		if err := json.Unmarshal([]byte(ln), &e); err != nil {
			if i == strings.Count(string(data), "\n") {
				break // the torn last line of a killed worker
			}
			t.Fatalf("%s line %d: %v", path, i+1, err)
		}
		out = append(out, e)
	}
	return out
}

// storeTraffic sums the store requests of the workers by op: count and
// total time, for the throughput test's account of where the time goes.
func storeTraffic(runs []workerRun) (count map[string]int, spent map[string]time.Duration) {
	count, spent = map[string]int{}, map[string]time.Duration{}
	for _, w := range runs {
		for _, e := range w.log {
			if e.Event == "store" {
				count[e.Op]++
				spent[e.Op] += e.end().Sub(e.start())
			}
		}
	}
	return count, spent
}

// cpuTime is the user + system CPU time the process pid has used so far
// (Linux /proc; 0 where it cannot be read).
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): utime and stime are the 12th and 13th of them, in ticks.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}
