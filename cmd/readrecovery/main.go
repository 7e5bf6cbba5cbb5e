// Command readrecovery runs the bundled fake server, the demo of the
// read-recovery transport, and the File journal tools.
//
//	readrecovery fakeserver [--addr 127.0.0.1:0] [--script FILE] [--seed FILE] [--upstream URL] [--account NAME]
//	        [--window 2s [--window-start +5s|RFC3339]] [--token-bucket RATE,BURST [--bucket-key account|host|subscription|deployment] [--quota-headers openai|arm]]
//	        [--retry-after-ms | --server-busy] [--route ROUTE]
//	readrecovery demo [--json] [--otlp URL]
//	readrecovery journal status [--text] [--watch [--interval 2s]] DIR
//	readrecovery journal verify DIR
//	readrecovery journal plan [--json] [--ids FILE] DIR
//	readrecovery journal review DIR --file ID --decision reupload|skip [--note TEXT]
//	readrecovery journal review DIR --pending [--marker shard-KK/pending-request.json] --note TEXT [--not-before UNIX]
//	readrecovery journal review DIR --restriction ENTRY --not-before UNIX --note TEXT
//	readrecovery version
//
// -h, -help or --help where a command or a flag is expected (and help in
// place of a command) prints that command's usage on stdout and exits 0;
// a help word given as a flag's value (--note help) or as a DIR (journal
// status help) is that value. Exit codes: 0 done (journal: clear or
// elapsed, verified clean, recorded); 1 findings (verify), a refused
// review, a listener that cannot be opened; 2 a usage error, a bad script
// or seed, or a DIR that is missing or not a journal run; 3 waiting (and a
// recorded --pending or --restriction review); 4 unresolved. SIGINT or
// SIGTERM ends every command promptly: it is asked to stop (the fake server
// shuts down and exits 0), and a command that has not returned after
// [signalGrace] is abandoned with exit 130 (SIGINT) or 143 (SIGTERM).
//
// The demo exports its spans over OTLP/HTTP with the small JSON exporter in
// otlp.go rather than the OpenTelemetry OTLP exporters: those bring gRPC
// and protobuf into the library's go.mod, which every user of the
// transport downloads, for one optional flag of a demo; and a module of
// its own would split the command users run from the checkout (`go run
// ./cmd/readrecovery demo`) and from CI's module list. otlp_test.go checks
// its output against the OTLP JSON encoding.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
)

const usage = `usage:
  readrecovery fakeserver [--addr 127.0.0.1:0] [--script FILE] [--seed FILE] [--upstream URL] [--account NAME]
          [--window 2s [--window-start +5s|RFC3339]] [--token-bucket RATE,BURST [--bucket-key account|host|subscription|deployment] [--quota-headers openai|arm]]
          [--retry-after-ms | --server-busy] [--route ROUTE]
  readrecovery demo [--json] [--otlp URL]
  readrecovery journal status [--text] [--watch [--interval 2s]] DIR
  readrecovery journal verify DIR
  readrecovery journal plan [--json] [--ids FILE] DIR
  readrecovery journal review DIR --file ID --decision reupload|skip [--note TEXT]
  readrecovery journal review DIR --pending [--marker shard-KK/pending-request.json] --note TEXT [--not-before UNIX]
  readrecovery journal review DIR --restriction ENTRY --not-before UNIX --note TEXT
  readrecovery version
--help (or -h) where a command or flag is expected prints its usage; readrecovery journal --help
tells what each journal command prints. Exit: 0 done, 1 findings or refused, 2 usage or not a
journal run, 3 waiting, 4 unresolved.
`

// signalGrace is how long a command may take to return after SIGINT or
// SIGTERM asked it to stop: a little more than the fake server's own
// graceful shutdown (shutdownGrace).
const signalGrace = shutdownGrace + time.Second

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	code := runWithSignals(sigs, signalGrace, os.Stderr, func(ctx context.Context) int {
		return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	})
	signal.Stop(sigs)
	os.Exit(code)
}

// runWithSignals runs cmd with a context that ends at the first signal on
// sigs, and returns cmd's exit code — or, when cmd has not returned within
// grace after the signal, 128 plus the signal's number.
func runWithSignals(sigs <-chan os.Signal, grace time.Duration, stderr io.Writer, cmd func(context.Context) int) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- cmd(ctx) }()
	select {
	case code := <-done:
		return code
	case sig := <-sigs:
		cancel()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case code := <-done:
			return code
		case <-t.C:
			fmt.Fprintf(stderr, "readrecovery: %v: stopped without waiting for the command\n", sig)
			if s, ok := sig.(syscall.Signal); ok {
				return 128 + int(s)
			}
			return 130
		}
	}
}

// run dispatches a subcommand and returns the process exit code: 2 for a
// usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// `fakeserver help` and `version help`: help in place of the only
	// argument, where these commands take none but flags.
	help := len(args) == 2 && isHelp(args[1])
	switch args[0] {
	case "fakeserver":
		if help {
			return runFakeserver(ctx, []string{"--help"}, stdout, stderr)
		}
		return runFakeserver(ctx, args[1:], stdout, stderr)
	case "demo":
		if help {
			return runDemo(ctx, []string{"--help"}, stdout, stderr)
		}
		return runDemo(ctx, args[1:], stdout, stderr)
	case "journal":
		return runJournalContext(ctx, args[1:], stdout, stderr)
	case "version":
		switch {
		case help:
			fmt.Fprintln(stdout, "usage: readrecovery version\nprints the module version, VCS revision and Go version of this binary")
			return 0
		case len(args) > 1:
			fmt.Fprintf(stderr, "readrecovery: version takes no argument\n%s", usage)
			return 2
		}
		fmt.Fprintln(stdout, version())
		return 0
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "readrecovery: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

// version is "readrecovery VERSION (GO)": the module version the binary was
// built from ("(devel)" for a build in the module itself), plus the
// revision when the build recorded one.
func version() string {
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("readrecovery %s%s (%s)", v, rev, runtime.Version())
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }
