package zmqtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// RawPeer is a hostile (or merely minimal) ZMQ PUB written byte by byte: it
// accepts TCP connections on loopback, answers the ZMTP 3.0 greeting and
// NULL READY (Socket-Type PUB) at once, and then writes whatever bytes a
// test gives it. Nothing of kvselect's transport (zmqin/zmtp) is used on
// its side, so a test of a listener's limits cannot share a bug with them.
//
// The accept loop is the only goroutine: an accepted connection is not read
// unless a test calls Next, Accept or RawConn.ReadMsg.
type RawPeer struct {
	ln       net.Listener
	accepted chan *RawConn
	done     chan struct{} // closed when the accept loop exits

	mu    sync.Mutex
	conns []net.Conn // guarded by mu; closed by close
}

type RawConn struct {
	net.Conn
	r *bufio.Reader
}

// Greeting is a ZMTP 3.0 greeting for the NULL mechanism, as-server 0.
func Greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}

// Ready is a READY command frame with Socket-Type typ.
func Ready(typ string) []byte {
	data := append([]byte{byte(len("Socket-Type"))}, "Socket-Type"...)
	data = binary.BigEndian.AppendUint32(data, uint32(len(typ)))
	return Command("READY", append(data, typ...))
}

// Command is a short command frame: name and data.
func Command(name string, data []byte) []byte {
	body := append(append([]byte{byte(len(name))}, name...), data...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

// Frame encodes one message frame: flags (MORE when more), then a 1- or
// 8-byte size, then body.
func Frame(more bool, body []byte) []byte {
	return append(FrameHeader(more, uint64(len(body))), body...)
}

// FrameHeader encodes a frame's flags and size only: a test can announce
// a body it never sends.
func FrameHeader(more bool, size uint64) []byte {
	var flags byte
	if more {
		flags |= 0x01
	}
	if size > 255 {
		return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
	}
	return []byte{flags, byte(size)}
}

// Msg encodes a complete multipart message.
func Msg(frames ...[]byte) []byte {
	var b []byte
	for i, f := range frames {
		b = append(b, Frame(i < len(frames)-1, f)...)
	}
	return b
}

// Live encodes a live KV event message [topic, seq, payload].
func Live(seq uint64, payload []byte) []byte {
	return Msg([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), payload)
}

// NewRawPeer starts a RawPeer announcing Socket-Type PUB; it closes at
// the test's cleanup.
func NewRawPeer(t testing.TB) *RawPeer { return NewRawPeerType(t, "PUB") }

// NewRawPeerType is NewRawPeer with another socket type in READY.
func NewRawPeerType(t testing.TB, typ string) *RawPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &RawPeer{ln: ln, accepted: make(chan *RawConn, 1<<14), done: make(chan struct{})}
	hello := append(Greeting(), Ready(typ)...)
	go func() {
		defer close(p.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			// The hello fits any socket buffer: it never blocks the loop.
			if _, err := c.Write(hello); err != nil {
				continue
			}
			select {
			case p.accepted <- &RawConn{Conn: c, r: bufio.NewReader(c)}:
			default: // nobody will ask for it (benchmarks)
			}
		}
	}()
	t.Cleanup(p.Close)
	return p
}

// Endpoint is the peer's tcp:// endpoint, for a listener to dial.
func (p *RawPeer) Endpoint() string { return "tcp://" + p.ln.Addr().String() }

// Close stops accepting, closes every connection and forgets them.
func (p *RawPeer) Close() {
	_ = p.ln.Close()
	<-p.done
	p.DropAll()
	for len(p.accepted) > 0 {
		<-p.accepted
	}
}

// DropAll closes every connection accepted so far.
func (p *RawPeer) DropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Next returns the next accepted connection once its subscriber has sent
// its greeting, READY and a subscription.
func (p *RawPeer) Next(t testing.TB) *RawConn {
	t.Helper()
	c := p.Accept(t)
	for {
		frames, err := c.ReadMsg()
		if err != nil {
			t.Fatalf("raw peer: %v", err)
		}
		if len(frames) == 1 && len(frames[0]) > 0 && frames[0][0] == 1 {
			return c
		}
	}
}

// Accept returns the next accepted connection once its peer's greeting
// has been read.
func (p *RawPeer) Accept(t testing.TB) *RawConn {
	t.Helper()
	select {
	case c := <-p.accepted:
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c.r, make([]byte, 64)); err != nil {
			t.Fatalf("raw peer: greeting: %v", err)
		}
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("raw peer: no connection within 10 s")
	}
	return nil
}

// ReadMsg reads the next message, skipping commands (READY).
func (c *RawConn) ReadMsg() ([][]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var frames [][]byte
	for {
		flags, err := c.r.ReadByte()
		if err != nil {
			return nil, err
		}
		var size uint64
		if flags&0x02 != 0 {
			var b [8]byte
			if _, err := io.ReadFull(c.r, b[:]); err != nil {
				return nil, err
			}
			size = binary.BigEndian.Uint64(b[:])
		} else {
			s, err := c.r.ReadByte()
			if err != nil {
				return nil, err
			}
			size = uint64(s)
		}
		if size > 1<<16 {
			return nil, errors.New("the peer sent a huge frame")
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(c.r, body); err != nil {
			return nil, err
		}
		if flags&0x04 != 0 {
			continue
		}
		frames = append(frames, body)
		if flags&0x01 == 0 {
			return frames, nil
		}
	}
}

// Send writes raw bytes; an error (the listener dropped the connection) is
// returned, not fatal: abuse tests expect it.
func (c *RawConn) Send(b []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(b)
	return err
}

// AwaitClosed reads until the listener closes the connection (EOF or
// reset), failing the test after 10 s.
func (c *RawConn) AwaitClosed(t testing.TB) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("raw peer: the listener kept the connection open")
	}
}
