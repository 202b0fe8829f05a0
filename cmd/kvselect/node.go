package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/kvselect/kvselect/perf"
)

// node is one process's parts (KV-event ingress, replica mesh, service,
// debug listener, HTTP servers, background loops, engines): every
// subcommand that runs until a signal (serve, indexer, the bench's
// in-process replicas) is a short composition of it. Parts start in the
// order the host adds them, and each pushes its stop onto the node's
// stack, so stop undoes them in reverse order whatever point start-up
// reached: a host that fails half-way returns n.stop(code) and leaks
// nothing.
//
// A part that ends on its own (an HTTP server whose Serve fails) reports
// through fail, which ends wait. The node is used from one goroutine (the
// host's), except fail, which any part may call.
type node struct {
	log    *slog.Logger
	what   string // the host's name in log messages: "serve", "indexer"
	stack  []stopper
	failed chan error // first failure of a part; buffered 1
}

// stopper is one part's way out.
type stopper struct {
	what string
	stop func() error
}

func newNode(what string, log *slog.Logger) *node {
	return &node{what: what, log: log, failed: make(chan error, 1)}
}

// onStop pushes a part's stop: it runs in stop, after the stops of every
// part added later. An error it returns is logged and makes the exit code
// 1.
func (n *node) onStop(what string, stop func() error) {
	n.stack = append(n.stack, stopper{what, stop})
}

// onStopDo is onStop for a stop that cannot fail.
func (n *node) onStopDo(what string, stop func()) {
	n.onStop(what, func() error { stop(); return nil })
}

// fail reports a part that ended on its own; the first one ends wait.
func (n *node) fail(what string, err error) {
	select {
	case n.failed <- errors.New(what + ": " + err.Error()):
	default:
	}
}

// wait blocks until ctx ends (exit code 0) or a part fails (1, logged).
func (n *node) wait(ctx context.Context) int {
	select {
	case <-ctx.Done():
		n.log.Info("shutting down")
		return 0
	case err := <-n.failed:
		n.log.Error(n.what+": a part stopped on its own", "err", err)
		return 1
	}
}

// stop runs the stop stack, last part first, and returns code, or 1 when a
// stop failed.
func (n *node) stop(code int) int {
	for i := len(n.stack) - 1; i >= 0; i-- {
		s := n.stack[i]
		if err := s.stop(); err != nil {
			n.log.Error("shutdown: "+s.what, "err", err)
			code = 1
		}
	}
	n.stack = nil
	return code
}

// loop runs f in a goroutine until the node stops it (its context ends);
// the stop waits for f to return.
func (n *node) loop(what string, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	n.onStopDo(what, func() {
		cancel()
		<-done
	})
}

// every is a loop that calls f with each tick of interval.
func (n *node) every(what string, interval time.Duration, f func(now time.Time)) {
	n.loop(what, func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				f(now)
			}
		}
	})
}

// shutdownGrace bounds how long in-flight requests may take after a signal.
const shutdownGrace = 30 * time.Second

// httpServer is what serveHTTP runs: the selector's or the indexer's
// httpapi.Server.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// serveHTTP listens on host:port and serves srv until the node stops; it
// returns the bound address. The stop drains: requests already in a
// handler finish within shutdownGrace, new ones get 503, then Serve's own
// result is read. A Serve that fails before that fails the node.
func (n *node) serveHTTP(srv httpServer, host string, port uint16) (net.Addr, error) {
	ln, err := n.listenTCP(host, port)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex // guards stopping and served's one read
	stopping := false
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		mu.Lock()
		defer mu.Unlock()
		if !stopping && err != nil {
			n.fail("the HTTP server stopped", err)
		}
		served <- err
	}()
	n.onStop("HTTP drain", func() error {
		mu.Lock()
		stopping = true
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-served; err == nil && serr != nil {
			err = serr
		}
		return err
	})
	return ln.Addr(), nil
}

// listenTCP binds host:port; the listener is closed at the stop even if a
// server took it over and closed it (closing it again is harmless), so
// that one bound before a later step failed does not outlive the node.
func (n *node) listenTCP(host string, port uint16) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		return nil, err
	}
	n.onStopDo("close "+ln.Addr().String(), func() { _ = ln.Close() })
	return ln, nil
}

// debugListener is the --debug-addr listener and its server.
type debugListener struct {
	ln   net.Listener
	srv  *perf.DebugServer
	done chan error
}

// serveDebug starts the debug listener on addr (startDebug) and stops it
// with the node; "" starts none. It returns the listener (nil for none).
func (n *node) serveDebug(addr string, explicit bool) (*debugListener, error) {
	if addr == "" {
		return nil, nil
	}
	d, err := startDebug(addr, explicit, n.log)
	if err != nil {
		return nil, err
	}
	n.onStopDo("debug listener", func() { d.stop(n.log) })
	return d, nil
}

// startDebug serves /debug/pprof on addr; a non-loopback address is
// logged as a warning. The listener is an extra, not the service: when
// addr is the flag's default (explicit false) and cannot be bound, as when
// a second kvselect runs on the host, it binds a free port on the same
// host instead and says so in one warning naming the flag. Only an address
// the user gave that cannot be bound is an error.
func startDebug(addr string, explicit bool, log *slog.Logger) (*debugListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil && !explicit {
		host, _, _ := net.SplitHostPort(addr)
		var err2 error
		if ln, err2 = net.Listen("tcp", net.JoinHostPort(host, "0")); err2 != nil {
			return nil, err
		}
		log.Warn("the default debug address is taken (another process on this host?); serving /debug/pprof on a free port instead (--debug-addr chooses one, --pprof=false serves none)",
			"default", addr, "addr", ln.Addr().String(), "err", err)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	d := &debugListener{ln: ln, srv: perf.NewDebugServer(printf(log, slog.LevelWarn)), done: make(chan error, 1)}
	go func() { d.done <- d.srv.Serve(ln) }()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("the debug listener is not on loopback: whoever reaches it can profile this process", "addr", ln.Addr().String())
	}
	log.Info("serving /debug/pprof", "url", "http://"+ln.Addr().String()+perf.PprofPrefix)
	return d, nil
}

// addr is the bound address, "" for none.
func (d *debugListener) addr() string {
	if d == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// stop shuts the debug server down, waiting a few seconds at most for a
// profile in progress.
func (d *debugListener) stop(log *slog.Logger) {
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown: debug listener", "err", err)
	}
	<-d.done
}
