package main

import (
	"fmt"
	"os"
)

// usage is printed for -h and for an unknown subcommand.
const usage = `usage: kvselect [serve|bench|mocker] [flags]

  serve   the selection service (default)
  bench   the load and routing-quality harness
  mocker  simulated vLLM engines publishing real ZMQ KV events
`

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveMain(args)
	case "bench", "mocker":
		// Honest until the subsystems land: nothing pretends to serve.
		fmt.Fprintf(os.Stderr, "kvselect %s: not built yet. Implemented so far: the KV prefix index (package radix) and\n"+
			"the scheduler (package sched); run `make test` and `make bench` to exercise them.\n", cmd)
		return 2
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "kvselect: unknown subcommand %q\n%s", cmd, usage)
		return 2
	}
}
