package httpapi

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestSweeperBounds: over an unbuffered pipe (a read or a write blocks
// until the other end acts), the sweeper ends a read blocked past the read
// bound (new or active connection) or the idle bound (idle connection),
// and a write blocked past the write bound, each with the timeout error a
// passed deadline gives, and not before its bound; a connection busy in no
// I/O (a handler running) is left alone however long it takes.
func TestSweeperBounds(t *testing.T) {
	const read, write, idle = 300 * time.Millisecond, 500 * time.Millisecond, 200 * time.Millisecond
	to, ok := newTimeouts(read, write, idle)
	if !ok || to.tick != 25*time.Millisecond {
		t.Fatalf("timeouts %+v %v: want a tick of an eighth of the smallest bound", to, ok)
	}
	tr := newConnTracker(0, false, to, true)
	cases := []struct {
		name  string
		state fasthttp.ConnState
		write bool
		bound time.Duration
	}{
		{"new, read", fasthttp.StateNew, false, read},
		{"active, read", fasthttp.StateActive, false, read},
		{"idle, read", fasthttp.StateIdle, false, idle},
		{"active, write", fasthttp.StateActive, true, write},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			server, client := net.Pipe()
			defer client.Close()
			c := tr.admit(server)
			if tc.state != fasthttp.StateNew {
				c.state.Store(int32(tc.state))
				c.stamp()
			}
			began := time.Now()
			var err error
			if tc.write {
				_, err = c.Write([]byte("response"))
			} else {
				_, err = c.Read(make([]byte, 16))
			}
			took := time.Since(began)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("blocked I/O ended with %v, want a timeout", err)
			}
			if took < tc.bound {
				t.Fatalf("closed after %v, before its bound %v", took, tc.bound)
			}
			if took > tc.bound+time.Second {
				t.Fatalf("closed after %v, long past its bound %v", took, tc.bound)
			}
		})
	}
	if got := tr.timedOut.Load(); got != uint64(len(cases)) {
		t.Fatalf("timed-out count %d, want %d", got, len(cases))
	}

	// Busy in the handler (no I/O) for four times the longest bound: kept,
	// and its next write starts its own bound.
	server, client := net.Pipe()
	defer client.Close()
	c := tr.admit(server)
	c.state.Store(int32(fasthttp.StateActive))
	c.stamp()
	time.Sleep(4 * write)
	if c.timedOut.Load() || c.closed.Load() {
		t.Fatal("a connection doing no I/O was closed")
	}
	go func() { _, _ = client.Read(make([]byte, 16)) }()
	if _, err := c.Write([]byte("response")); err != nil {
		t.Fatalf("write after a long handler: %v", err)
	}
	_ = c.Close()
}

// TestSweeperStops: the sweeper runs only while a connection is open, and
// a connection admitted after it stopped starts it again.
func TestSweeperStops(t *testing.T) {
	to, _ := newTimeouts(time.Second, time.Second, 50*time.Millisecond)
	tr := newConnTracker(0, false, to, true)
	for round := range 2 {
		server, client := net.Pipe()
		c := tr.admit(server)
		if !tr.sweeping.Load() {
			t.Fatalf("round %d: no sweeper with a connection open", round)
		}
		_, err := c.Read(make([]byte, 1)) // state new: ends at the read bound
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round %d: %v", round, err)
		}
		client.Close()
		deadline := time.Now().Add(5 * time.Second)
		for tr.sweeping.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the sweeper still runs with no connection open", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
