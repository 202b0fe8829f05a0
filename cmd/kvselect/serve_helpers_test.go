package main

import (
	"context"
	"io"
	"net"
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
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	logs := &syncBuf{}
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, append([]string{"--host", "127.0.0.1", "--port", "0", "--pprof=false"}, args...), envOf(env), logs, ready)
	}()
	r := &running{t: t, logs: logs}
	select {
	case b := <-ready:
		addr := b.http
		r.base = "http://" + addr
	case code := <-done:
		cancel()
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, logs.String())
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

// freePort returns a loopback TCP port that was free a moment ago (for
// flags that take a port, not an address, such as --replica-sync-port).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
