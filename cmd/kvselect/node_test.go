package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNodeStopsInReverse: the stop stack runs last part first, every stop
// runs even after one fails, and a failed stop makes the code 1.
func TestNodeStopsInReverse(t *testing.T) {
	var logs syncBuf
	n := newNode("test", slog.New(slog.NewTextHandler(&logs, nil)))
	var order []string
	for _, name := range []string{"a", "b", "c"} {
		n.onStop(name, func() error {
			order = append(order, name)
			if name == "b" {
				return errors.New("b broke")
			}
			return nil
		})
	}
	if code := n.stop(0); code != 1 || strings.Join(order, "") != "cba" || !strings.Contains(logs.String(), "shutdown: b") {
		t.Fatalf("code %d, order %v, logs %s", code, order, logs.String())
	}
	if code := n.stop(0); code != 0 {
		t.Fatal("a stopped node stops again")
	}
}

// failingServer is an HTTP server whose Serve fails at once.
type failingServer struct{}

func (failingServer) Serve(ln net.Listener) error    { ln.Close(); return errors.New("accept broke") }
func (failingServer) Shutdown(context.Context) error { return nil }

// TestNodePartFails: a part that stops on its own ends wait with 1 and
// the drain reports its error.
func TestNodePartFails(t *testing.T) {
	var logs syncBuf
	n := newNode("test", slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := n.serveHTTP(failingServer{}, "127.0.0.1", 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := n.wait(ctx); code != 1 || !strings.Contains(logs.String(), "accept broke") {
		t.Fatalf("wait %d: %s", code, logs.String())
	}
	if code := n.stop(1); code != 1 {
		t.Fatalf("stop %d", code)
	}
}

// TestServeFailsHalfwayLeaksNothing: a serve whose start-up fails after
// the ingress, the mesh, the service and its loops exist (its explicit
// --debug-addr is taken) returns 1 and leaves no goroutine behind.
func TestServeFailsHalfwayLeaksNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	base := runtime.NumGoroutine()
	var logs syncBuf
	mesh := freePort(t)
	code := serve(context.Background(), []string{"--host", "127.0.0.1", "--port", "0", "--debug-addr", ln.Addr().String(),
		"--replica-sync-port", strconv.Itoa(mesh), "--engine-metrics-interval", "1h"}, envOf(nil), &logs, nil)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, logs.String())
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines %d > %d after a failed start:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
