package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// inProcessServer returns the bench.Config.StartServer hook: it runs
// `kvselect serve` in this process on a free loopback port, with this
// process's DYN_* environment and extraArgs, and stops it (exit code
// checked) on stop.
func inProcessServer(stderr io.Writer, extraArgs ...string) func() (string, func(), error) {
	return func() (string, func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan int, 1)
		var logs syncBuf
		go func() {
			args := append([]string{"--host", "127.0.0.1", "--port", "0"}, extraArgs...)
			done <- serve(ctx, args, os.LookupEnv, &logs, ready)
		}()
		select {
		case addr := <-ready:
			stop := func() {
				cancel()
				if code := <-done; code != 0 {
					fmt.Fprintf(stderr, "kvselect bench: in-process server exited %d:\n%s", code, logs.String())
				}
			}
			return "http://" + addr, stop, nil
		case code := <-done:
			cancel()
			return "", nil, fmt.Errorf("in-process server exited %d:\n%s", code, logs.String())
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
