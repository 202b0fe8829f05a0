package main

import (
	"fmt"
	"os"
)

// usage is printed for -h and for an unknown subcommand.
const usage = `usage: kvselect [serve|indexer|bench|mocker] [flags]

  serve   the selection service (default)
  indexer the standalone KV indexer (python -m dynamo.indexer)
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
	case "indexer":
		return indexerMain(args)
	case "mocker":
		return runMocker(args)
	case "bench":
		return runBench(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "kvselect: unknown subcommand %q\n%s", cmd, usage)
		return 2
	}
}
