package httpapi

import (
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

// Connection timeouts without deadlines. fasthttp enforces ReadTimeout,
// WriteTimeout and IdleTimeout by setting the socket's deadline three
// times a request (two read deadlines, one write deadline), each a clock
// read and a runtime timer moved: about 1 µs of a request's 50 on this
// path, the largest single cost the no-op server does not have. The
// connection tracker enforces the same three bounds instead, with one
// goroutine that looks at every open connection each tick:
//
//   - a connection blocked in a read while new (before its first
//     request's first byte) or while reading a request (StateActive) is
//     closed once ReadTimeout has passed since it was accepted or since
//     the request's first byte (fasthttp's read deadline is the same:
//     accept or first byte, plus ReadTimeout, for the whole request);
//   - one blocked in a read while idle between requests, once IdleTimeout
//     (ReadTimeout when 0, as fasthttp) has passed since it went idle;
//   - one blocked in a write, once WriteTimeout has passed since the
//     response's first write (fasthttp arms the write deadline once
//     before writing the response; the handler's time counts for neither).
//
// A bound is enforced between its limit and its limit plus one tick (an
// eighth of the smallest timeout, at most a second). The connection's
// phase stamps are written only by its fasthttp goroutine (Read, Write,
// connState) and read by the sweeper: atomic stores, no clock read (the
// clock is the sweeper's tick count). A read or write the sweeper ended
// returns os.ErrDeadlineExceeded, the error a passed deadline gives, so
// fasthttp ends the connection as it would on its own timeout and logs
// nothing.

// Phases of a connection's I/O (trackedConn.io).
const (
	ioNone int32 = iota
	ioRead
	ioWrite
)

// timeouts are a tracker's bounds, in ticks of tick (0: unbounded).
type timeouts struct {
	tick              time.Duration
	read, write, idle int64
}

// newTimeouts converts the configured bounds; ok is false when all are 0.
func newTimeouts(read, write, idle time.Duration) (timeouts, bool) {
	if idle == 0 {
		idle = read // fasthttp: IdleTimeout 0 is ReadTimeout
	}
	smallest := time.Duration(0)
	for _, d := range [...]time.Duration{read, write, idle} {
		if d > 0 && (smallest == 0 || d < smallest) {
			smallest = d
		}
	}
	if smallest == 0 {
		return timeouts{}, false
	}
	tick := min(max(smallest/8, time.Millisecond), time.Second)
	ticks := func(d time.Duration) int64 {
		if d <= 0 {
			return 0
		}
		return int64((d + tick - 1) / tick)
	}
	return timeouts{tick: tick, read: ticks(read), write: ticks(write), idle: ticks(idle)}, true
}

// startSweep starts the sweeper if it is not running; admit calls it for
// every connection, so it runs while a connection is open.
func (t *connTracker) startSweep() {
	if !t.hasTimeouts || !t.sweeping.CompareAndSwap(false, true) {
		return
	}
	go t.sweep()
}

// sweep closes the connections past a bound, every tick, until none is
// open. A connection admitted while it stops restarts it (startSweep runs
// after the admission is counted, and sweep looks again after clearing
// sweeping).
func (t *connTracker) sweep() {
	tick := time.NewTicker(t.to.tick)
	defer tick.Stop()
	var expired []*trackedConn
	for range tick.C {
		now := t.clock.Add(1)
		if t.open.Load() == 0 {
			t.sweeping.Store(false)
			if t.open.Load() == 0 || !t.sweeping.CompareAndSwap(false, true) {
				return
			}
		}
		expired = expired[:0]
		t.each(func(c *trackedConn) {
			if c.expired(&t.to, now) {
				expired = append(expired, c)
			}
		})
		for _, c := range expired {
			c.timedOut.Store(true)
			t.timedOut.Add(1)
			_ = c.Close()
		}
		clear(expired)
	}
}

// expired reports whether c is blocked past its phase's bound at tick now.
func (c *trackedConn) expired(to *timeouts, now int64) bool {
	switch c.io.Load() {
	case ioRead:
		since, limit := c.stateSince.Load(), to.read
		if fasthttp.ConnState(c.state.Load()) == fasthttp.StateIdle {
			limit = to.idle
		}
		return limit > 0 && now-since > limit
	case ioWrite:
		return to.write > 0 && now-c.writeSince.Load() > to.write
	}
	return false
}

// stamp records a state change of c at the tracker's clock: the phase
// stamps restart.
func (c *trackedConn) stamp() {
	c.stateSince.Store(c.t.clock.Load())
	c.writeSince.Store(-1)
}

// Read counts the reads that return data (see reads) and marks c blocked
// in a read for the sweeper.
func (c *trackedConn) Read(p []byte) (int, error) {
	c.io.Store(ioRead)
	n, err := c.Conn.Read(p)
	c.io.Store(ioNone)
	if n > 0 {
		c.reads.Add(1)
	}
	if err != nil && c.timedOut.Load() {
		err = errTimedOut("read")
	}
	return n, err
}

// Write marks c blocked in a write for the sweeper; the first write after
// a state change starts the write bound.
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.writeSince.Load() < 0 {
		c.writeSince.Store(c.t.clock.Load())
	}
	c.io.Store(ioWrite)
	n, err := c.Conn.Write(p)
	c.io.Store(ioNone)
	if err != nil && c.timedOut.Load() {
		err = errTimedOut("write")
	}
	return n, err
}

// errTimedOut is the error of an operation the sweeper ended: a net.Error
// whose Timeout is true, wrapping os.ErrDeadlineExceeded ("i/o timeout",
// which fasthttp's worker pool does not log).
func errTimedOut(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.ErrDeadlineExceeded}
}
