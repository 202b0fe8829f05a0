package main

import (
	"context"
	"fmt"
	"os"
)

// usage is printed for -h and for an unknown subcommand.
const usage = `usage: kvselect [serve|indexer|epp|bench|mocker|health] [flags]
       kvselect --version

  serve   the selection service (default)
  indexer the standalone KV indexer (python -m dynamo.indexer)
  epp     the Gateway API Inference Extension endpoint picker (Envoy ext_proc gRPC)
  bench   the load and routing-quality harness
  mocker  simulated vLLM engines publishing real ZMQ KV events
  health  GET a selector's /health (or --path); exit 0 on a 200 (container health checks)
`

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		cmd = "version"
	}
	switch cmd {
	case "serve":
		return untilSignal(serve, args)
	case "indexer":
		return untilSignal(runIndexer, args)
	case "epp":
		return untilSignal(runEpp, args)
	case "mocker":
		return runMocker(args)
	case "bench":
		return runBench(args)
	case "health":
		return runHealth(context.Background(), args, os.Stdout, os.Stderr)
	case "version", "-version", "--version":
		b := readBuildInfo()
		fmt.Printf("kvselect %s (%s)\n", b.version, b.goVersion)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "kvselect: unknown subcommand %q\n%s", cmd, usage)
		return 2
	}
}
