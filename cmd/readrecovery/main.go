// Command readrecovery runs the bundled fake server, the demo of the
// read-recovery transport, and the File journal tools.
//
//	readrecovery fakeserver [--addr 127.0.0.1:0] [--script FILE] [--upstream URL]
//	readrecovery demo [--json]
//	readrecovery journal status DIR
//	readrecovery journal verify DIR
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  readrecovery fakeserver [--addr 127.0.0.1:0] [--script FILE] [--upstream URL]
  readrecovery demo [--json]
  readrecovery journal status DIR
  readrecovery journal verify DIR
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit code: 2 for a
// usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "fakeserver":
		return runFakeserver(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "journal":
		return runJournal(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "readrecovery: unknown command %q\n%s", args[0], usage)
		return 2
	}
}
