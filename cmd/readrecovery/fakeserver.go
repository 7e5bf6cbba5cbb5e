package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// shutdownGrace bounds the graceful shutdown after SIGINT/SIGTERM.
const shutdownGrace = 5 * time.Second

// runFakeserver serves the fake (or, with --upstream, the throttling proxy)
// until ctx is done, then shuts it down and returns 0. The first line on
// stdout is "listening on http://HOST:PORT"; then, in proxy mode, the
// upstream, one line per scripted rule, with --seed what was seeded, and
// one line per request and one per injected fault (the admin routes under
// /_fakeserver/, such as a health probe, are not requests: no line, no
// rule counts them). --window, --token-bucket and --server-busy add rules
// by time and by rate after the script's (see timedFlags); a fault line
// then ends with the rule's decision. A usage error, a bad script or a bad
// seed returns 2, a listener that cannot be opened 1.
func runFakeserver(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("readrecovery fakeserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "`address` to listen on")
	scriptPath := fs.String("script", "", "JSON fault script `file` (format: docs/fakeserver.md)")
	upstream := fs.String("upstream", "", "proxy mode: forward to this `URL` (such as Azurite's), injecting the script's faults")
	seedPath := fs.String("seed", "", "JSON `file` of indexes, files and blobs to start with (format: docs/fakeserver.md); not with --upstream")
	account := fs.String("account", fakeserver.DefaultAccount, "storage account `name` recognised as the first segment of path-style URLs /{account}/{container}/{blob}; \"\" for the plain layout only")
	var tf timedFlags
	tf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: readrecovery fakeserver [--addr 127.0.0.1:0] [--script FILE] [--seed FILE] [--upstream URL] [--account NAME]")
		fmt.Fprintln(fs.Output(), "       [--window 2s [--window-start +5s|RFC3339]] [--token-bucket 200,50 [--bucket-key account|host|subscription|deployment] [--quota-headers openai|arm]]")
		fmt.Fprintln(fs.Output(), "       [--retry-after-ms | --server-busy] [--route ROUTE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "readrecovery: fakeserver: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}

	script := fakeserver.NewScript()
	if *scriptPath != "" {
		s, err := fakeserver.LoadScriptFile(*scriptPath)
		if err != nil {
			fmt.Fprintf(stderr, "readrecovery: fakeserver: --script %v\n", err)
			return 2
		}
		script = s
	}
	if err := tf.addRules(script, time.Now()); err != nil {
		fmt.Fprintf(stderr, "readrecovery: fakeserver: %v\n", err)
		fs.Usage()
		return 2
	}

	var seed *fakeserver.Seed
	if *seedPath != "" {
		if *upstream != "" {
			fmt.Fprintln(stderr, "readrecovery: fakeserver: --seed preloads the in-memory fake; a proxy's state is its upstream's (drop --seed or --upstream)")
			return 2
		}
		sd, err := fakeserver.LoadSeedFile(*seedPath)
		if err != nil {
			fmt.Fprintf(stderr, "readrecovery: fakeserver: --seed %v\n", err)
			return 2
		}
		seed = sd
	}

	logger := &requestLog{w: stdout}
	opts := []fakeserver.Option{fakeserver.WithScript(script), fakeserver.WithObserver(logger.request), fakeserver.WithAccount(*account)}
	var srv *fakeserver.Server
	if *upstream != "" {
		u, err := url.Parse(*upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			fmt.Fprintf(stderr, "readrecovery: fakeserver: --upstream %q: want an absolute http or https URL without credentials or query\n", *upstream)
			return 2
		}
		srv = fakeserver.NewProxy(u, script, opts...)
	} else {
		srv = fakeserver.New(opts...)
		if err := srv.Seed(seed); err != nil { // unreachable: LoadSeedFile checked it
			_ = srv.Close()
			fmt.Fprintf(stderr, "readrecovery: fakeserver: --seed %v\n", err)
			return 2
		}
	}

	// Hold the log until the listening line is out: it must come first.
	logger.mu.Lock()
	base, err := srv.Listen(*addr)
	if err != nil {
		logger.mu.Unlock()
		fmt.Fprintf(stderr, "readrecovery: %v\n", err) // err starts with "fakeserver: "
		return 1
	}
	fmt.Fprintf(stdout, "listening on %s\n", base)
	if srv.Upstream() != nil {
		fmt.Fprintf(stdout, "proxying to %s\n", srv.Upstream().Redacted())
	}
	for i, r := range script.Rules() {
		fmt.Fprintf(stdout, "rule %d: %s\n", i, r)
	}
	if seed != nil {
		fmt.Fprintf(stdout, "seeded indexes=%d files=%d blobs=%d\n", len(seed.Indexes), len(seed.Files), len(seed.Blobs))
	}
	logger.mu.Unlock()

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "readrecovery: fakeserver: shutdown: %v\n", err)
	}
	fmt.Fprintln(stderr, "readrecovery: fakeserver: stopped")
	return 0
}

// requestLog writes one line per request and one per injected fault. It
// prints what the ledger keeps: no query values, no header, no body.
type requestLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *requestLog) request(r fakeserver.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s request #%d %s %s %s", r.Arrived.UTC().Format(time.RFC3339), r.Seq, logToken(r.Method), r.Route, strconv.Quote(clip(r.Path, 256)))
	if len(r.QueryKeys) > 0 {
		keys := make([]string, len(r.QueryKeys))
		for i, k := range r.QueryKeys {
			keys[i] = logToken(k)
		}
		fmt.Fprintf(&b, " query-keys=%s", strings.Join(keys, ","))
	}
	status := "reset"
	if r.Status != 0 {
		status = strconv.Itoa(r.Status)
	}
	fmt.Fprintf(&b, " -> %s", status)
	if r.RequestID != "" {
		fmt.Fprintf(&b, " id=%s", logToken(r.RequestID))
	}
	if r.BodyDigest != "" && r.BodySize > 0 {
		fmt.Fprintf(&b, " body=%dB %s", r.BodySize, r.BodyDigest)
	}
	b.WriteByte('\n')
	if r.Fault != "" {
		fmt.Fprintf(&b, "%s fault #%d %s rule %d: %s", r.Arrived.UTC().Format(time.RFC3339), r.Seq, r.Route, r.Rule, r.Fault)
		for _, d := range r.Decisions {
			if d.Rule == r.Rule {
				fmt.Fprintf(&b, " (%s)", d)
			}
		}
		b.WriteByte('\n')
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, b.String())
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// logToken keeps a client-chosen string on one line and bounded: anything
// but printable ASCII without spaces is quoted, and long values are cut.
func logToken(s string) string {
	s = clip(s, 128)
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

// parseFlags parses args with fs (whose output is the command's error
// output). A requested usage (-h, -help or --help where a flag is
// expected) goes to stdout with exit 0; a bad flag to the error output with
// exit 2. ok is false when the command must return code.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	stderr := fs.Output()
	fs.SetOutput(io.Discard) // the flag package's own usage, printed below
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.Usage()
		return 2, false
	}
	return 0, true
}
