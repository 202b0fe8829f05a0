package zmqin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/kvselect/kvselect/core"
)

// This file is the only place that talks ZMTP. It uses go-zeromq/zmq4's
// connection layer (zmq4.Open: greeting, NULL handshake, socket-type check;
// Conn.SendMsg and Conn.RecvMsg: framing) over net.Conns that this package
// dials, accepts and closes itself, instead of zmq4's Socket types. The
// Socket types of v0.17.0 were measured or read to misbehave for us
// (spec/dependencies-and-limits.md section 6, and their source):
//   - Dial retries with time.Sleep, ignoring cancellation while asleep;
//   - automatic reconnect races with Close;
//   - a SUB's per-connection goroutine blocks forever on its 10-message
//     channel when the socket is closed while that channel is full (leak);
//   - a PUB's writer goroutine never exits (socket.Close does not close the
//     writer), has no HWM by default and writes subscribers one by one;
//   - every socket starts a reaper goroutine per Dial or Listen.
// Owning the net.Conn makes Close unblock a pending read at once, lets a
// listener's lifetime be exactly its goroutine's, and lets reads and writes
// go through a buffer (zmq4's Conn reads a frame in 2-3 read calls and
// writes one in 2, which is 5-6 syscalls per 3-frame message unbuffered).
//
// A "socket" here is therefore one ZMTP connection: a SUB or DEALER that
// dials one endpoint, or one accepted peer of a PUB or ROUTER. That is all
// a KV-event listener needs (one endpoint per socket, never fan-in).

// ErrEndpoint marks an endpoint string this package cannot use.
var ErrEndpoint = errors.New("zmqin: invalid ZMQ endpoint")

// handshakeTimeout bounds the ZMTP greeting on a fresh connection, so a
// peer that accepts TCP but never speaks ZMTP cannot hold a dial forever.
const handshakeTimeout = 5 * time.Second

// bufSize is the read and write buffer of one connection.
const bufSize = 64 << 10

// ParseEndpoint reads ep with core's parser (the one reading of an endpoint
// string, shared with registration), wrapping ErrEndpoint.
func ParseEndpoint(ep string) (core.ZMQEndpoint, error) {
	z, err := core.ParseZMQEndpoint(ep)
	if err != nil {
		return z, fmt.Errorf("%w %q: %v", ErrEndpoint, ep, err)
	}
	return z, nil
}

// ErrFrameTooLarge marks a ZMTP frame whose announced size exceeds the
// connection's limit; the connection is dropped before the frame's body is
// allocated (zmq4 itself allocates whatever size a peer announces).
var ErrFrameTooLarge = errors.New("zmqin: ZMTP frame too large")

// greetingLen is the size of the ZMTP 3.x greeting that precedes frames.
const greetingLen = 64

// bufConn is a net.Conn whose reads come through a buffer and whose writes
// go into one; Flush sends them. Reads and writes may run on two goroutines
// (one each): the two buffers are independent.
//
// With maxFrame > 0, reads also follow the ZMTP framing of the incoming
// byte stream (greeting, then frames: flags, a 1- or 8-byte size, the
// body) and fail with ErrFrameTooLarge, returning no byte of the size,
// as soon as a frame announces more than maxFrame bytes. The scan state
// below belongs to the reading goroutine.
type bufConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer

	maxFrame uint64
	skip     uint64 // bytes of greeting or body still to pass
	sizeLeft int    // size bytes still to read; 0 when at a flags byte or in skip
	size     uint64 // the size read so far
}

func newBufConn(c net.Conn, maxFrame int) *bufConn {
	return &bufConn{Conn: c, r: bufio.NewReaderSize(c, bufSize), w: bufio.NewWriterSize(c, bufSize),
		maxFrame: uint64(max(maxFrame, 0)), skip: greetingLen}
}

func (c *bufConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.maxFrame == 0 || n == 0 {
		return n, err
	}
	if ferr := c.scan(p[:n]); ferr != nil {
		return 0, ferr
	}
	return n, err
}

// scan advances the framing state over b.
func (c *bufConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case c.skip > 0:
			k := min(c.skip, uint64(len(b)))
			c.skip -= k
			b = b[k:]
		case c.sizeLeft > 0:
			c.size = c.size<<8 | uint64(b[0])
			c.sizeLeft--
			b = b[1:]
			if c.sizeLeft == 0 {
				if c.size > c.maxFrame {
					return fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, c.size, c.maxFrame)
				}
				c.skip = c.size
			}
		default: // a flags byte
			c.size = 0
			c.sizeLeft = 1
			if b[0]&0x02 != 0 { // long frame: 8-byte size
				c.sizeLeft = 8
			}
			b = b[1:]
		}
	}
	return nil
}

func (c *bufConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *bufConn) Flush() error                { return c.w.Flush() }

// zconn is one ZMTP connection: the zmq4 framing over a buffered net.Conn
// owned by this package. Close may be called from any goroutine, any number
// of times; it makes a blocked recv return an error.
type zconn struct {
	raw net.Conn
	bc  *bufConn
	hs  *handshakeConn // the rw of z: flushes each write unless hold
	z   *zmq4.Conn
}

// openZMTP performs the ZMTP greeting and NULL handshake on c as socket type
// typ; server is true on the accepting side. maxFrame > 0 limits the size
// of incoming frames (see bufConn). The handshake is bounded by
// handshakeTimeout and by ctx. On error c is closed.
func openZMTP(ctx context.Context, c net.Conn, typ zmq4.SocketType, server bool, maxFrame int) (*zconn, error) {
	bc := newBufConn(c, maxFrame)
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	// zmq4.Open writes its greeting and READY through bc; flushing is
	// needed before each read of the peer's part, so the writer is
	// unbuffered during the handshake by flushing on every write.
	hs := &handshakeConn{bufConn: bc}
	z, err := zmq4.Open(hs, null.Security(), typ, zmq4.SocketIdentity(nil), server, nil)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return &zconn{raw: c, bc: bc, hs: hs, z: z}, nil
}

// handshakeConn flushes every write: zmq4.Open alternates writes and reads
// of the handshake and knows nothing of buffering. After the handshake the
// zmq4.Conn keeps using it, so sends still flush per write unless the
// caller batches with sendHeld.
type handshakeConn struct {
	*bufConn
	// hold suppresses the per-write flush while sendHeld writes a
	// batch of messages; only the goroutine that sends touches it.
	hold bool
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	n, err := c.bufConn.Write(p)
	if err == nil && !c.hold {
		err = c.bufConn.Flush()
	}
	return n, err
}

// dialZMTP dials ep and opens a ZMTP connection as socket type typ. The
// dial and the handshake end when ctx is done.
func dialZMTP(ctx context.Context, ep string, typ zmq4.SocketType, maxFrame int) (*zconn, error) {
	z, err := ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	// ZMTP 3.0 has no heartbeats, so a half-open connection (the worker's
	// host died) is found only by TCP keepalive; Go's default (15 s idle,
	// 15 s interval, 9 probes) takes about 2.5 min, during which a worker
	// back at the same address would get no subscription. These settings
	// find it in about 25 s.
	d := net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}}
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	c, err := d.DialContext(dctx, z.Network, z.DialAddr())
	cancel()
	if err != nil {
		return nil, err
	}
	return openZMTP(ctx, c, typ, false, maxFrame)
}

// recv reads one message; commands (none are expected in ZMTP 3.0 after the
// handshake) are returned with Type zmq4.CmdMsg for the caller to skip.
func (c *zconn) recv() (zmq4.Msg, error) { return c.z.RecvMsg() }

// send writes one multi-frame message and flushes it.
func (c *zconn) send(frames ...[]byte) error {
	if err := c.sendHeld(frames); err != nil {
		return err
	}
	return c.flush()
}

// sendHeld writes one message without flushing; call flush after a run of
// them. Only the sending goroutine may use it.
func (c *zconn) sendHeld(frames [][]byte) error {
	c.hs.hold = true
	err := c.z.SendMsg(zmq4.NewMsgFrom(frames...))
	c.hs.hold = false
	return err
}

func (c *zconn) flush() error { return c.bc.Flush() }

func (c *zconn) setReadDeadline(t time.Time) { _ = c.raw.SetReadDeadline(t) }

// Close closes the underlying connection; a blocked recv returns an error.
func (c *zconn) Close() error { return c.raw.Close() }
