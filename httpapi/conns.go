package httpapi

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Connection management: every listener Serve is given is wrapped so that
//
//   - a temporary accept error (EMFILE, ENFILE: out of descriptors;
//     ECONNABORTED, ENOBUFS, ENOMEM) is retried with net/http's backoff,
//     5 ms doubling to 1 s, instead of ending Serve (fasthttp treats every
//     accept error but a timeout as permanent, and the process exited);
//   - at most Config.MaxConnections connections are open; one over the cap
//     is answered 503 {"error": ...} with Connection: close and closed (a
//     TLS one is closed unanswered: its handshake has not run). fasthttp's
//     own Server.Concurrency limit answers "503 The connection cannot be
//     served because Server.Concurrency limit exceeded" as text/plain, not
//     the JSON error every other answer has, so it is set above the cap
//     and never fires;
//   - every open connection is registered, with the state fasthttp last
//     reported for it, so Shutdown can drain them (drain.go).

// Accept backoff, as net/http's Server.Serve.
const (
	acceptDelayMin = 5 * time.Millisecond
	acceptDelayMax = time.Second
)

// maxRejecting bounds the goroutines answering rejected connections (each
// holds a descriptor for up to rejectLinger); past it a rejected connection
// is closed unanswered.
const maxRejecting = 16

// rejectLinger bounds how long a rejected connection is kept to send its
// 503 and read the request the client may have sent (closing with unread
// input would reset the connection and could destroy the answer).
const rejectLinger = time.Second

// connTracker counts and registers a server's open connections.
type connTracker struct {
	max       int64  // cap on open connections; 0 is none
	tls       bool   // connections are TLS: reject without an answer
	rejectMsg []byte // the 503 response to a connection over the cap

	open          atomic.Int64
	rejected      atomic.Uint64
	acceptRetries atomic.Uint64
	rejecting     atomic.Int64

	// The read, write and idle bounds (timeouts.go): the sweeper runs
	// while a connection is open (sweeping) and advances clock a tick at
	// a time; timedOut counts the connections it closed.
	to          timeouts
	hasTimeouts bool
	sweeping    atomic.Bool
	clock       atomic.Int64
	timedOut    atomic.Uint64

	mu struct {
		sync.Mutex
		conns map[*trackedConn]struct{} // the open connections
	}
}

func newConnTracker(max int, tls bool, to timeouts, hasTimeouts bool) *connTracker {
	t := &connTracker{max: int64(max), tls: tls, to: to, hasTimeouts: hasTimeouts}
	t.mu.conns = map[*trackedConn]struct{}{}
	body := appendError(nil, "too many open connections: the limit is "+strconv.Itoa(max))
	t.rejectMsg = append([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	return t
}

// admit registers c, or rejects it when the cap is reached (nil).
func (t *connTracker) admit(c net.Conn) *trackedConn {
	if n := t.open.Add(1); t.max > 0 && n > t.max {
		t.open.Add(-1)
		t.rejected.Add(1)
		t.reject(c)
		return nil
	}
	tc := &trackedConn{Conn: c, t: t}
	tc.stamp()
	t.mu.Lock()
	t.mu.conns[tc] = struct{}{}
	t.mu.Unlock()
	t.startSweep()
	return tc
}

// reject answers c 503 with Connection: close on a goroutine of its own
// (at most maxRejecting at once), half-closes it, reads what the client
// sends until it closes or rejectLinger passes, and closes it.
func (t *connTracker) reject(c net.Conn) {
	if t.tls {
		_ = c.Close()
		return
	}
	if t.rejecting.Add(1) > maxRejecting {
		t.rejecting.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer t.rejecting.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(rejectLinger))
		if _, err := c.Write(t.rejectMsg); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// each calls f for every open connection, under the registry lock.
func (t *connTracker) each(f func(*trackedConn)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.mu.conns {
		f(c)
	}
}

// trackedConn is an admitted connection.
type trackedConn struct {
	net.Conn
	t      *connTracker
	closed atomic.Bool
	// state is the fasthttp.ConnState last reported (connState); requests
	// counts the requests begun (StateActive), so the drain can tell a
	// connection idle across two looks from one that served in between.
	state    atomic.Int32
	requests atomic.Uint64
	// reads counts the reads that returned data: fasthttp reports
	// StateActive only after its read of a request's first byte returned,
	// so between that read and the report a connection looks idle with
	// nothing unread in its socket; a changed count tells the drain.
	reads atomic.Uint64
	// idleSeen is requests+reads at the drain's last look when idle;
	// owned by the drain goroutine.
	idleSeen  uint64
	idleLooks int

	// The sweeper's view (timeouts.go): io is the I/O c is blocked in;
	// stateSince the tracker's clock at the last state change (or the
	// accept); writeSince at the first write since then (-1: none);
	// timedOut is set when the sweeper closed c.
	io         atomic.Int32
	stateSince atomic.Int64
	writeSince atomic.Int64
	timedOut   atomic.Bool
}

// Close closes the connection and unregisters it (once).
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.t.mu.Lock()
		delete(c.t.mu.conns, c)
		c.t.mu.Unlock()
		c.t.open.Add(-1)
	}
	return err
}

// listener wraps a net.Listener for a Server: admission, accept retries.
type listener struct {
	net.Listener
	t   *connTracker
	log *slog.Logger

	closeOnce sync.Once
	done      chan struct{} // closed by Close
	closeErr  error
}

func newListener(ln net.Listener, t *connTracker, log *slog.Logger) *listener {
	return &listener{Listener: ln, t: t, log: log, done: make(chan struct{})}
}

// Accept returns the next admitted connection. Temporary errors are
// retried with backoff; closing the listener ends a wait.
func (l *listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporaryAccept(err) || l.isClosed() {
				return nil, err
			}
			delay = min(max(2*delay, acceptDelayMin), acceptDelayMax)
			l.t.acceptRetries.Add(1)
			l.log.Warn("http: accept failed; retrying", "err", err, "delay", delay)
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-l.done:
				timer.Stop()
				return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
			}
			continue
		}
		delay = 0
		if tc := l.t.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// Close closes the listener once; later calls return the first result.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.closeErr = l.Listener.Close()
	})
	return l.closeErr
}

func (l *listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// temporaryAccept reports whether an accept error passes: out of
// descriptors (process or system), a connection aborted before it was
// accepted, or kernel memory short.
func temporaryAccept(err error) bool {
	for _, e := range [...]syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
