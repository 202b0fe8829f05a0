package httpapi

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// waitCtx is the context a selection runs under when it may wait (a router
// queue, a session another booking initializes): it ends when the client's
// connection is gone, so a waiting request leaves the queue (the
// reference drops the selection future when its caller disconnects).
//
// fasthttp does not read a connection while its handler runs, so nothing
// notices a client that hangs up. Nothing is watched until a wait begins
// (the first Done call); then one goroutine parks in the runtime's
// netpoller on the connection's descriptor (no spinning, no thread) and
// peeks without consuming: end of stream or a reset ends the context; any
// bytes (a pipelined request, a TLS alert) end the watch without ending
// the context, since they cannot be told from a live client without
// reading them. stop ends the watch (a past read deadline wakes the parked
// read), waits for the goroutine and clears the deadline, so fasthttp's
// next read of the connection is its own.
//
// Lifetime: a waitCtx lives in a pooled request; reset arms it for one
// handler call, stop must run before the handler returns.
type waitCtx struct {
	raw net.Conn // the connection's socket (nil: no detection)

	mu       sync.Mutex
	done     chan struct{} // made by the first Done; closed when the client is gone
	finished chan struct{} // closed when the watcher exits
	stopping atomic.Bool
}

// reset arms w for a request on connection c.
func (w *waitCtx) reset(c net.Conn) {
	w.raw = rawConn(c)
	w.done, w.finished = nil, nil
	w.stopping.Store(false)
}

// rawConn unwraps the tracking and TLS layers down to the socket.
func rawConn(c net.Conn) net.Conn {
	for {
		switch x := c.(type) {
		case *trackedConn:
			c = x.Conn
		case *tls.Conn:
			c = x.NetConn()
		default:
			return c
		}
	}
}

func (w *waitCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *waitCtx) Value(any) any               { return nil }

// Err is context.Canceled once the client is gone.
func (w *waitCtx) Err() error {
	w.mu.Lock()
	d := w.done
	w.mu.Unlock()
	if d == nil {
		return nil
	}
	select {
	case <-d:
		return context.Canceled
	default:
		return nil
	}
}

// Done starts the watch on its first call.
func (w *waitCtx) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return w.done
	}
	w.done = make(chan struct{})
	sc, ok := w.raw.(syscall.Conn)
	if !ok || !peekSupported {
		return w.done
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return w.done
	}
	w.finished = make(chan struct{})
	go w.watch(rc, w.done, w.finished)
	return w.done
}

// watch parks until the socket is readable, then peeks one byte.
func (w *waitCtx) watch(rc syscall.RawConn, done, finished chan struct{}) {
	defer close(finished)
	gone := false
	_ = rc.Read(func(fd uintptr) bool {
		if w.stopping.Load() {
			return true
		}
		n, err := peekByte(fd)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
			return false // wait for readiness
		case err != nil || n == 0:
			gone = true // reset, or end of stream
		}
		return true
	})
	if gone && !w.stopping.Load() {
		close(done)
	}
}

// stop ends the watch, if one began, before the handler returns.
func (w *waitCtx) stop() {
	w.mu.Lock()
	finished := w.finished
	w.mu.Unlock()
	if finished == nil {
		return
	}
	w.stopping.Store(true)
	_ = w.raw.SetReadDeadline(time.Unix(1, 0))
	<-finished
	_ = w.raw.SetReadDeadline(time.Time{})
}
