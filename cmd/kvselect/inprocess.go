package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/kvselect/kvselect/bench"
)

// inProcessServer returns the bench.Config.StartServer hook: it runs
// `kvselect serve` in this process on a free loopback port, with this
// process's DYN_* environment and extraArgs, and stops it (exit code
// checked) on stop. With profile, its debug listener serves pprof on
// another free loopback port (bench.Server.PprofURL, where --profile
// reads); without, it serves none.
func inProcessServer(stderr io.Writer, profile bool, extraArgs ...string) func() (bench.Server, error) {
	return func() (bench.Server, error) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan bound, 1)
		done := make(chan int, 1)
		var logs syncBuf
		args := []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false"}
		if profile {
			args = []string{"--host", "127.0.0.1", "--port", "0", "--debug-addr", "127.0.0.1:0"}
		}
		args = append(args, extraArgs...)
		go func() { done <- serve(ctx, args, os.LookupEnv, &logs, ready) }()
		select {
		case b := <-ready:
			stop := func() {
				cancel()
				if code := <-done; code != 0 {
					fmt.Fprintf(stderr, "kvselect bench: in-process server exited %d:\n%s", code, logs.String())
				}
			}
			srv := bench.Server{URL: "http://" + b.http, Stop: stop}
			if b.debug != "" {
				srv.PprofURL = "http://" + b.debug + "/debug/pprof"
			}
			return srv, nil
		case code := <-done:
			cancel()
			return bench.Server{}, fmt.Errorf("in-process server exited %d:\n%s", code, logs.String())
		}
	}
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// inProcessEpp returns the bench.Config.StartEPP hook: it runs `kvselect
// epp` in this process with the harness's workers file, its ext_proc
// port on a free loopback port (picked here: the EPP reports only its
// HTTP port when ready), its HTTP port on another, with this process's
// DYN_* environment and extraArgs, and stops it (exit code checked) on
// stop. With profile its debug listener serves pprof as
// inProcessServer's does.
func inProcessEpp(stderr io.Writer, profile bool, extraArgs ...string) func(workersFile string) (bench.EPPServer, error) {
	return func(workersFile string) (bench.EPPServer, error) {
		grpcPort, err := freeLoopbackPort()
		if err != nil {
			return bench.EPPServer{}, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan bound, 1)
		done := make(chan int, 1)
		var logs syncBuf
		args := []string{"--host", "127.0.0.1", "--metrics-port", "0", "--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", "0",
			"--workers-file", workersFile,
			// Plaintext, as the no-op ext_proc server the run compares it
			// with: the ratio is the picker's, not TLS's.
			"--secure-serving=false"}
		if profile {
			args = append(args, "--debug-addr", "127.0.0.1:0")
		} else {
			args = append(args, "--pprof=false")
		}
		args = append(args, extraArgs...)
		go func() { done <- runEpp(ctx, args, os.LookupEnv, &logs, ready) }()
		select {
		case b := <-ready:
			stop := func() {
				cancel()
				if code := <-done; code != 0 {
					fmt.Fprintf(stderr, "kvselect bench: in-process epp exited %d:\n%s", code, logs.String())
				}
			}
			srv := bench.EPPServer{GRPCAddr: "127.0.0.1:" + strconv.Itoa(grpcPort), URL: "http://" + b.http, Stop: stop}
			if b.debug != "" {
				srv.PprofURL = "http://" + b.debug + "/debug/pprof"
			}
			return srv, nil
		case code := <-done:
			cancel()
			return bench.EPPServer{}, fmt.Errorf("in-process epp exited %d:\n%s", code, logs.String())
		}
	}
}

// freeLoopbackPort is a loopback TCP port free when it returns (another
// listener may take it before the caller binds it: tolerable for a
// bench's in-process server, which then fails to start, loudly).
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
