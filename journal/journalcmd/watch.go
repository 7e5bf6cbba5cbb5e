package journalcmd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/journal/internal/store"
)

// clearScreen moves a terminal's cursor home and clears it: --watch
// redraws in place on a terminal, and appends frames anywhere else.
const clearScreen = "\x1b[H\x1b[2J"

// minInterval is the floor of --interval: each frame reads the whole run
// again, so a shorter interval is raised to it (and the frame says so).
const minInterval = 100 * time.Millisecond

// statusCommand runs `status [--text] [--watch [--interval D]] RUN`: the run's status
// as JSON, or at a glance as text (--text), redrawn until it is done or stopped (--watch).
// Output that cannot be written (stdout closed, a full disk) is exit 2, said on stderr.
func (c *Command) statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags(c.Sub + "status")
	text := fset.Bool("text", false, "")
	watch := fset.Bool("watch", false, "")
	interval := fset.Duration("interval", 2*time.Second, "")
	run, code, ok := c.parse(fset, args, stdout, stderr)
	if !ok {
		return code
	}
	if *interval <= 0 {
		return c.usageError(stderr, fmt.Sprintf("%sstatus: --interval %v: must be positive", c.Sub, *interval))
	}
	if *watch {
		return c.watch(ctx, run, max(*interval, minInterval), stdout, stderr)
	}
	j, err := c.Open(ctx, run)
	if err != nil {
		return c.unreadable(err, stderr)
	}
	st := j.Status(c.now())
	var out strings.Builder
	if *text {
		writeGlance(&out, st)
	} else {
		b, err := st.CommandJSON()
		if err != nil {
			return c.fail(stderr, 2, c.Sub+"status: ", err)
		}
		fmt.Fprintf(&out, "%s\n", b)
	}
	return c.emit(stdout, stderr, out.String(), stateCode(st.State))
}

// emit writes out and returns code, or 2 when out cannot be written: a
// --watch whose output goes nowhere must end, never redraw silently forever.
func (c *Command) emit(stdout, stderr io.Writer, out string, code int) int {
	if _, err := io.WriteString(stdout, out); err != nil {
		return c.fail(stderr, 2, c.Sub+"status: cannot write the status: ", err)
	}
	return code
}

// watch redraws the run at a glance every interval, reading the run again
// each time, until it is done (every planned file acked, unknown or
// reviewed: none in flight, none never attempted), stopped (unresolved), or
// ctx ends (SIGINT, SIGTERM). It exits with the code of the last status: 0
// clear or elapsed, 3 waiting, 4 unresolved; 2 when the run cannot be read
// or a frame cannot be written.
func (c *Command) watch(ctx context.Context, dir string, interval time.Duration, stdout, stderr io.Writer) int {
	redraw := isTerminal(stdout)
	t := time.NewTimer(0)
	defer t.Stop()
	last := -1
	for frame := 0; ; frame++ {
		select {
		case <-ctx.Done():
			if last < 0 {
				return 2
			}
			return last
		case <-t.C:
		}
		j, err := c.Open(ctx, dir)
		if err != nil {
			if ctx.Err() != nil && last >= 0 {
				return last // stopped while reading (SIGINT)
			}
			return c.unreadable(err, stderr)
		}
		now := c.now()
		st := j.Status(now)
		last = stateCode(st.State)
		var b strings.Builder
		if redraw {
			b.WriteString(clearScreen)
		} else if frame > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s %sstatus --watch %s: %s, every %v\n", c.Prog, c.Sub, store.EscapeName(dir), now.UTC().Format(time.RFC3339), interval)
		writeGlance(&b, st)
		end := true
		switch {
		case st.State == journal.Unresolved:
			fmt.Fprintln(&b, "stopped: the run is unresolved")
		case st.Files != nil && st.Files[journal.FileInFlight] == 0 && st.Files[journal.FileNeverAttempted] == 0:
			fmt.Fprintln(&b, "done: no file in flight, none never attempted")
		default:
			end = false
		}
		if code := c.emit(stdout, stderr, b.String(), last); end || code != last {
			return code
		}
		t.Reset(interval)
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// glanceClasses are the classes of the run at a glance, in print order.
var glanceClasses = []journal.FileState{journal.FileAcked, journal.FileInFlight, journal.FileNeverAttempted, journal.FileUnknown, journal.FileReviewed}

// writeRun prints the run's state and reason.
func writeRun(w io.Writer, st journal.Status) {
	fmt.Fprintf(w, "run: %s", st.State)
	if st.State == journal.Waiting {
		fmt.Fprintf(w, " (%d s remaining, until not_before_utc %d)", st.RemainingSeconds, st.NotBeforeUTC)
	}
	fmt.Fprintf(w, ": %s\n", st.Reason)
}

// writeGlance prints st at a glance: the run's state and reason, the
// counts per class, and a line per shard.
func writeGlance(w io.Writer, st journal.Status) {
	writeRun(w, st)
	if st.Files != nil {
		total := 0
		counts := make([]string, 0, len(glanceClasses))
		for _, k := range glanceClasses {
			total += st.Files[k]
			counts = append(counts, fmt.Sprintf("%d %s", st.Files[k], k))
		}
		fmt.Fprintf(w, "files: %d planned: %s\n", total, strings.Join(counts, ", "))
	} else {
		fmt.Fprintln(w, "files: no plan.json (a run written before it existed): not counted")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSTATE\tMARKER\tMETHOD\tFILE\tWORKER\tAGE\tACKED\tIN-FLIGHT\tNEVER-ATTEMPTED\tUNKNOWN\tREVIEWED")
	for _, sv := range st.Shards {
		marker, method, file, worker, age := "-", "-", "-", "-", "-"
		if sv.Marker != "" {
			marker, method, age = sv.Marker, store.EscapeName(sv.Method), fmt.Sprintf("%d s", sv.AgeSeconds)
			file = cmp.Or(sv.FileDigest, "-")
			if sv.Host != "" || sv.PID != 0 {
				worker = fmt.Sprintf("%s pid %d", store.EscapeName(sv.Host), sv.PID)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", sv.Shard, sv.State, marker, method, file, worker, age)
		for _, k := range glanceClasses {
			if sv.Files == nil {
				fmt.Fprint(tw, "\t-")
				continue
			}
			fmt.Fprintf(tw, "\t%d", sv.Files[k])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
