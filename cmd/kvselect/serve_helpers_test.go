package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// running is a `kvselect serve` started by startServe.
type running struct {
	t     *testing.T
	base  string // http://host:port
	debug string // the debug listener's host:port, "" without one
	logs  *syncBuf
}

// startServe runs serve(args, env) in this process until the test ends,
// then checks it exited 0. It serves no pprof unless args ask for it
// (--pprof=true --debug-addr 127.0.0.1:0).
func startServe(t *testing.T, args []string, env map[string]string) *running {
	t.Helper()
	return startRun(t, serve, args, env)
}

// startIndexerRun is startServe for `kvselect indexer`.
func startIndexerRun(t *testing.T, args []string, env map[string]string) *running {
	t.Helper()
	return startRun(t, runIndexer, args, env)
}

func startRun(t *testing.T, run func(context.Context, []string, func(string) (string, bool), io.Writer, chan<- bound) int, args []string, env map[string]string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	logs := &syncBuf{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--host", "127.0.0.1", "--port", "0", "--pprof=false"}, args...), envOf(env), logs, ready)
	}()
	r := &running{t: t, logs: logs}
	select {
	case b := <-ready:
		r.base, r.debug = "http://"+b.http, b.debug
	case code := <-done:
		cancel()
		t.Fatalf("exited %d: %s", code, logs.String())
	}
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exited %d: %s", code, logs.String())
		}
	})
	return r
}

// do sends one request with a JSON body (when not empty) and returns the
// status and body.
func (r *running) do(method, path, body string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
