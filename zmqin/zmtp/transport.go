package zmtp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/kvselect/kvselect/core"
)

// This file is the only place that talks ZMTP. It uses go-zeromq/zmq4's
// connection layer for the handshake only (zmq4.Open: greeting, NULL
// handshake, socket-type check) over net.Conns that this package dials,
// accepts and closes itself, and reads and writes frames itself: zmq4's
// Conn.RecvMsg appends every frame of a message until one comes without
// the MORE flag, so an unterminated message grows without limit. zmq4's
// Socket types are not used either: those of v0.17.0 were measured, or
// read in its source, to misbehave for us:
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

// bufSize is the read buffer of a receiving connection and the write
// buffer of a publishing one (bufSizes).
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

// Errors of a connection whose peer broke a Limits bound. The connection
// is dropped when the frame header that breaks the bound arrives, before
// anything is allocated for that frame's body.
var (
	// ErrFrameTooLarge: a frame announced more than MaxFrameSize bytes
	// (zmq4 itself allocates whatever size a peer announces).
	ErrFrameTooLarge = errors.New("zmqin: ZMTP frame too large")
	// ErrTooManyFrames: a message went on past the hard frame budget
	// (Limits.HardFrames; zmq4 keeps every frame of an unterminated
	// message).
	ErrTooManyFrames = errors.New("zmqin: ZMTP message has too many frames")
	// ErrMessageTooLarge: a message's frames together exceeded
	// MaxMessageSize bytes.
	ErrMessageTooLarge = errors.New("zmqin: ZMTP message too large")
	// ErrExtraFrames is the one error after which the connection stays in
	// step: a message had more than MaxFrames frames (and at most
	// HardFrames); Recv read it to its end, keeping nothing of it, and the
	// next Recv reads the next message. A caller counts the drop and goes
	// on: a PUB drops what it sends while its subscriber is away, so
	// closing the connection for one bad message would lose the good ones
	// behind it.
	ErrExtraFrames = errors.New("zmqin: ZMTP message with extra frames dropped")
	// errProtocol: a command frame inside a multipart message.
	errProtocol = errors.New("zmqin: ZMTP protocol error")
)

// Limits bound what one connection can make the reader hold: every frame
// of the message being read stays in memory until the message ends, so
// with these limits one message never holds more than MaxMessageSize
// bytes, whatever the peer announces or leaves unterminated. Each is
// checked at a frame's header. They are per connection because the
// protocols differ: a live KV event message is at most 3 frames [topic,
// seq, payload], a replay reply 4, a replica-sync envelope would be 2.
//
// A message of more than MaxFrames frames is not a protocol breach that
// must cost the connection: its frames past MaxFrames are read and
// discarded as they arrive (never buffered; the ones before are let go)
// and Recv reports ErrExtraFrames at its end. Only a message past
// HardFrames frames, a count no honest publisher reaches, or past
// MaxMessageSize bytes (discarded frames count) drops the connection.
type Limits struct {
	MaxFrames      int // frames per message kept, at least 1
	MaxFrameSize   int // bytes per frame
	MaxMessageSize int // bytes per message, all frames together
	HardFrames     int // frames per message past which the connection is dropped; 0 is DefaultHardFrames
}

// DefaultHardFrames is Limits.HardFrames when 0: far beyond the 4 frames
// of any message of the protocols read here, and small enough that a
// stream of empty frames (which MaxMessageSize does not bound) ends
// quickly.
const DefaultHardFrames = 1024

func (l Limits) hardFrames() int {
	if l.HardFrames > 0 {
		return max(l.HardFrames, l.MaxFrames)
	}
	return max(DefaultHardFrames, l.MaxFrames)
}

// handshakeMaxFrame bounds the greeting's commands (READY and its
// metadata: a socket type and an identity of at most 255 bytes).
const handshakeMaxFrame = 64 << 10

// greetingLen is the size of the ZMTP 3.x greeting that precedes frames.
const greetingLen = 64

// ZMTP frame flags.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// bufConn is a net.Conn whose reads come through a buffer and whose writes
// go into one; Flush sends them. Reads and writes may run on two goroutines
// (one each): the two buffers are independent.
//
// Reads through Read (zmq4.Open's, during the handshake) also follow the
// ZMTP framing of the incoming byte stream (greeting, then frames: flags,
// a 1- or 8-byte size, the body) and fail with ErrFrameTooLarge, returning
// no byte of the size, as soon as a frame announces more than maxFrame
// bytes. After the handshake frames are read from r by Conn.Recv, which
// checks its Limits itself. The scan state below belongs to the reading
// goroutine.
type bufConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer

	maxFrame uint64
	skip     uint64 // bytes of greeting or body still to pass
	sizeLeft int    // size bytes still to read; 0 when at a flags byte or in skip
	size     uint64 // the size read so far
}

func newBufConn(c net.Conn, rsize, wsize, maxFrame int) *bufConn {
	return &bufConn{Conn: c, r: bufio.NewReaderSize(c, rsize), w: bufio.NewWriterSize(c, wsize),
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
			if b[0]&flagLong != 0 {
				c.sizeLeft = 8
			}
			b = b[1:]
		}
	}
	return nil
}

func (c *bufConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *bufConn) Flush() error                { return c.w.Flush() }

// SocketType is a ZMTP socket type, as announced in the handshake. A peer
// of an incompatible type (PUB-SUB and DEALER-ROUTER pair) is refused.
type SocketType string

// The socket types this package speaks.
const (
	Pub    SocketType = "PUB"
	Sub    SocketType = "SUB"
	Dealer SocketType = "DEALER"
	Router SocketType = "ROUTER"
)

// Conn is one ZMTP 3.0 connection with the NULL mechanism over a buffered
// net.Conn: zmq4 performs the greeting and handshake, then Conn reads and
// writes frames itself, reading within its Limits. kvselect's ZMTP
// endpoints all use it: the KV-event listeners (package zmqin), the
// replica mesh (zmqin/mesh) and zmqpub's simulated publisher. One
// goroutine may receive while another sends.
// Close may be called from any goroutine, any number of times; it makes a
// blocked Recv return an error.
//
// Recv answers a ZMTP 3.1 PING with a PONG (libzmq peers with
// ZMQ_HEARTBEAT_IVL set, as Dynamo's replica and indexer sockets are,
// drop a connection that sends them nothing within ZMQ_HEARTBEAT_TIMEOUT
// of a PING: a SUB that only listens would be dropped every few seconds).
// The PONG is written by the receiving goroutine, so wmu orders it with
// the sender's writes: a PONG lands between two messages, never inside
// one, and is skipped while the sender writes (command).
type Conn struct {
	raw net.Conn
	bc  *bufConn
	lim Limits
	wmu sync.Mutex // held while writing into bc.w or flushing it
}

// bufSizes returns the read and write buffer sizes of a socket type: the
// side that receives KV events reads in 64 KiB, the side that publishes
// them writes in 64 KiB; the other direction carries a subscription or a
// replay request of a few bytes (and the handshake).
func bufSizes(typ SocketType) (rsize, wsize int) {
	switch typ {
	case Pub, Router:
		return 4 << 10, bufSize
	}
	return bufSize, 512
}

// Open performs the ZMTP greeting and NULL handshake on c as socket type
// typ; server is true on the accepting side. lim bounds every message
// received afterwards. The handshake is bounded by a 5 s timeout and by
// ctx. On error c is closed.
func Open(ctx context.Context, c net.Conn, typ SocketType, server bool, lim Limits) (*Conn, error) {
	rsize, wsize := bufSizes(typ)
	bc := newBufConn(c, rsize, wsize, handshakeMaxFrame)
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	// zmq4.Open writes its greeting and READY through bc; flushing is
	// needed before each read of the peer's part, so the writer is
	// unbuffered during the handshake by flushing on every write.
	_, err := zmq4.Open(flushConn{bc}, null.Security(), zmq4.SocketType(typ), zmq4.SocketIdentity(nil), server, nil)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	bc.maxFrame = 0 // frames are read by Recv from now on
	return &Conn{raw: c, bc: bc, lim: lim}, nil
}

// flushConn flushes every write: zmq4.Open alternates writes and reads of
// the handshake and knows nothing of buffering.
type flushConn struct{ *bufConn }

func (c flushConn) Write(p []byte) (int, error) {
	n, err := c.bufConn.Write(p)
	if err == nil {
		err = c.bufConn.Flush()
	}
	return n, err
}

// Dial dials endpoint ep (tcp:// or ipc://) and opens a ZMTP connection
// as socket type typ (Open). The dial and the handshake end when ctx is
// done, and after 5 s each.
func Dial(ctx context.Context, ep string, typ SocketType, lim Limits) (*Conn, error) {
	z, err := ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	// We answer heartbeats but send none, so a half-open connection (the
	// worker's host died) is found only by TCP keepalive; Go's default (15 s idle,
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
	return Open(ctx, c, typ, false, lim)
}

// Recv reads the next message into frames[:0] and returns it. Each frame
// is a fresh allocation the caller may keep. Command frames, between or
// inside messages, are consumed: a PING is answered with a PONG (see
// Conn), any other command is skipped. A message of more than MaxFrames
// frames is read to its end and discarded: Recv returns frames[:0] and an
// error wrapping ErrExtraFrames, and the connection can go on. A message
// that breaks c's other Limits fails with ErrTooManyFrames,
// ErrMessageTooLarge or ErrFrameTooLarge at the header of the frame that
// breaks it; the caller must then drop the connection, as the stream is
// left inside that frame.
func (c *Conn) Recv(frames [][]byte) ([][]byte, error) { return c.recv(frames, false) }

// RecvInto is Recv for a caller done with a message before it reads the
// next: each frame is read into the body frames held at its index when
// that body's capacity fits it and is at most bodyChunk (64 KiB), and is
// a fresh allocation otherwise. The bodies returned are valid until the
// next RecvInto on the same slice; a steady stream of messages of at most
// 64 KiB frames is read with no allocation, and at most one message's
// bodies stay held between calls.
func (c *Conn) RecvInto(frames [][]byte) ([][]byte, error) { return c.recv(frames, true) }

func (c *Conn) recv(frames [][]byte, reuse bool) ([][]byte, error) {
	frames = frames[:0]
	total := uint64(0)
	n, hard := 0, c.lim.hardFrames() // data frames of this message so far
	for {
		flags, size, err := c.header()
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			// Also between two frames of a message: libzmq sends a
			// heartbeat PING when its timer fires, even mid-message
			// (stream_engine_base.cpp, timer_event), and its own
			// receiver takes commands there. A command is not part of
			// the message and does not count toward its limits.
			if flags&flagMore != 0 {
				return nil, fmt.Errorf("%w: command frame with the MORE flag", errProtocol)
			}
			if err := c.checkSize(size); err != nil {
				return nil, err
			}
			if err := c.command(int(size)); err != nil {
				return nil, err
			}
			continue
		}
		if n++; n > hard {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyFrames, hard)
		}
		if err := c.checkSize(size); err != nil {
			return nil, err
		}
		if total += size; total > uint64(c.lim.MaxMessageSize) {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrMessageTooLarge, c.lim.MaxMessageSize)
		}
		if n > c.lim.MaxFrames {
			// The message is dropped: let go of what it kept, skip this
			// frame's body without buffering it.
			if n == c.lim.MaxFrames+1 {
				clear(frames)
				frames = frames[:0]
			}
			if _, err := c.bc.r.Discard(int(size)); err != nil {
				return nil, err
			}
			if flags&flagMore == 0 {
				return frames, fmt.Errorf("%w: %d frames, at most %d", ErrExtraFrames, n, c.lim.MaxFrames)
			}
			continue
		}
		var old []byte
		if k := len(frames); reuse && k < cap(frames) {
			old = frames[:k+1][k]
		}
		body, err := c.body(int(size), old)
		if err != nil {
			return nil, err
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			return frames, nil
		}
	}
}

// maxPing is the largest PING command body: a name-size byte, "PING", a
// 2-byte TTL and at most 16 bytes of context (ZMTP 3.1, RFC 37).
const maxPing = 1 + 4 + 2 + 16

// command consumes a command frame's body of n bytes (after the
// handshake), answering a PING with a PONG that echoes its context.
func (c *Conn) command(n int) error {
	if n > maxPing {
		_, err := c.bc.r.Discard(n)
		return err
	}
	var b [maxPing]byte
	if _, err := io.ReadFull(c.bc.r, b[:n]); err != nil {
		return err
	}
	if n < 7 || string(b[:5]) != "\x04PING" {
		return nil
	}
	// The PONG frame: command flag, size, then "\x04PONG" and the context.
	var pong [2 + 5 + 16]byte
	k := copy(pong[:], "\x00\x00\x04PONG")
	k += copy(pong[k:], b[7:n])
	pong[0], pong[1] = flagCommand, byte(k-2)
	// With the lock taken the sender is writing: its data reaches the
	// peer, and libzmq's heartbeat timeout ends at any frame it receives
	// (stream_engine_base.cpp, decode_and_push), so the PONG can be
	// skipped rather than make the receiver wait behind a blocked write.
	if !c.wmu.TryLock() {
		return nil
	}
	defer c.wmu.Unlock()
	if _, err := c.bc.w.Write(pong[:k]); err != nil {
		return err
	}
	return c.bc.Flush()
}

func (c *Conn) checkSize(size uint64) error {
	if size > uint64(c.lim.MaxFrameSize) {
		return fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, size, c.lim.MaxFrameSize)
	}
	return nil
}

// header reads a frame's flags and size.
func (c *Conn) header() (flags byte, size uint64, err error) {
	r := c.bc.r
	if flags, err = r.ReadByte(); err != nil {
		return 0, 0, err
	}
	if flags&flagLong == 0 {
		b, err := r.ReadByte()
		return flags, uint64(b), err
	}
	// Peek, not io.ReadFull into a local array: the array would escape
	// through the io.Reader and cost an allocation per long frame.
	b, err := r.Peek(8)
	if err != nil {
		if err == io.EOF && len(b) > 0 {
			err = io.ErrUnexpectedEOF // as io.ReadFull reports a short read
		}
		return 0, 0, err
	}
	size = binary.BigEndian.Uint64(b)
	_, err = r.Discard(8)
	return flags, size, err
}

// bodyChunk is the size up to which a frame body is allocated at once.
const bodyChunk = 64 << 10

// body reads a frame body of n bytes (n within the Limits), into old when
// n is at most bodyChunk and old's capacity fits it. A body larger than
// bodyChunk grows, doubling, as its bytes arrive: a peer that announces a
// large frame and sends it slowly, or never, holds at most twice what it
// sent.
func (c *Conn) body(n int, old []byte) ([]byte, error) {
	if n <= bodyChunk {
		b := old[:0]
		if old == nil || cap(old) < n || cap(old) > bodyChunk {
			b = make([]byte, n)
		}
		b = b[:n]
		_, err := io.ReadFull(c.bc.r, b)
		return b, err
	}
	b := make([]byte, 0, bodyChunk)
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), n-len(b)))
		}
		k, err := io.ReadFull(c.bc.r, b[len(b):min(cap(b), n)])
		b = b[:len(b)+k]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Send writes one multi-frame message and flushes it.
func (c *Conn) Send(frames ...[]byte) error {
	if err := c.SendHeld(frames); err != nil {
		return err
	}
	return c.Flush()
}

// SendHeld writes one message into the write buffer without flushing;
// call Flush after a run of them. Sends are for one goroutine at a time
// (Recv's PONGs aside).
func (c *Conn) SendHeld(frames [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := c.bc.w
	for i, f := range frames {
		var hdr [9]byte
		if i < len(frames)-1 {
			hdr[0] |= flagMore
		}
		h := hdr[:2]
		if len(f) > 255 {
			hdr[0] |= flagLong
			binary.BigEndian.PutUint64(hdr[1:], uint64(len(f)))
			h = hdr[:]
		} else {
			hdr[1] = byte(len(f))
		}
		if _, err := w.Write(h); err != nil {
			return err
		}
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return nil
}

// Flush sends what SendHeld buffered.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.bc.Flush()
}

// SetReadDeadline bounds the Recv calls until t (zero: no bound).
func (c *Conn) SetReadDeadline(t time.Time) { _ = c.raw.SetReadDeadline(t) }

// Close closes the underlying connection; a blocked Recv returns an error.
func (c *Conn) Close() error { return c.raw.Close() }

// The reasons a connection is dropped for breaking its Limits, in the
// order of LimitReasonNames (the metric labels): the index of a
// connection's counter of drops by reason (mesh.Stats.LimitDrops).
const (
	LimitTooManyFrames = iota
	LimitMessageTooLarge
	LimitFrameTooLarge
	NumLimitReasons
)

// LimitReasonNames are the labels of the connection-drop reasons.
var LimitReasonNames = [NumLimitReasons]string{"too_many_frames", "message_too_large", "frame_too_large"}

// LimitReason is err's reason (LimitTooManyFrames, ...), or -1 for an
// error that breaks no limit.
func LimitReason(err error) int {
	switch {
	case errors.Is(err, ErrTooManyFrames):
		return LimitTooManyFrames
	case errors.Is(err, ErrMessageTooLarge):
		return LimitMessageTooLarge
	case errors.Is(err, ErrFrameTooLarge):
		return LimitFrameTooLarge
	}
	return -1
}
