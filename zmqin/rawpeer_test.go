package zmqin

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

// rawPeer is a hostile (or merely minimal) ZMQ PUB written byte by byte: it
// accepts TCP connections on loopback, answers the ZMTP 3.0 greeting and
// NULL READY (Socket-Type PUB) at once, and then writes whatever bytes a
// test gives it. Nothing of this package's transport is used on its side,
// so a test of the listener's limits cannot share a bug with them.
//
// The accept loop is the only goroutine: an accepted connection is not read
// unless a test calls rawConn.awaitSubscription.
type rawPeer struct {
	ln       net.Listener
	accepted chan *rawConn
	done     chan struct{} // closed when the accept loop exits

	mu    sync.Mutex
	conns []net.Conn // guarded by mu; closed by close
}

type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// rawGreeting is a ZMTP 3.0 greeting for the NULL mechanism, as-server 0.
func rawGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}

// rawReady is a READY command frame with Socket-Type typ.
func rawReady(typ string) []byte {
	data := append([]byte{byte(len("Socket-Type"))}, "Socket-Type"...)
	data = binary.BigEndian.AppendUint32(data, uint32(len(typ)))
	return rawCommand("READY", append(data, typ...))
}

// rawCommand is a short command frame: name and data.
func rawCommand(name string, data []byte) []byte {
	body := append(append([]byte{byte(len(name))}, name...), data...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

// rawFrame encodes one message frame: flags (MORE when more), then a 1- or
// 8-byte size, then body.
func rawFrame(more bool, body []byte) []byte {
	return append(rawFrameHeader(more, uint64(len(body))), body...)
}

// rawFrameHeader encodes a frame's flags and size only: a test can announce
// a body it never sends.
func rawFrameHeader(more bool, size uint64) []byte {
	var flags byte
	if more {
		flags |= 0x01
	}
	if size > 255 {
		return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
	}
	return []byte{flags, byte(size)}
}

// rawMsg encodes a complete multipart message.
func rawMsg(frames ...[]byte) []byte {
	var b []byte
	for i, f := range frames {
		b = append(b, rawFrame(i < len(frames)-1, f)...)
	}
	return b
}

// rawLive encodes a live KV event message [topic, seq, payload].
func rawLive(seq uint64, payload []byte) []byte {
	return rawMsg([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), payload)
}

func newRawPeer(t testing.TB) *rawPeer { return newRawPeerType(t, "PUB") }

// newRawPeerType is newRawPeer with another socket type in READY.
func newRawPeerType(t testing.TB, typ string) *rawPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{ln: ln, accepted: make(chan *rawConn, 1<<14), done: make(chan struct{})}
	hello := append(rawGreeting(), rawReady(typ)...)
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
			case p.accepted <- &rawConn{Conn: c, r: bufio.NewReader(c)}:
			default: // nobody will ask for it (benchmarks)
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *rawPeer) endpoint() string { return "tcp://" + p.ln.Addr().String() }

// close stops accepting, closes every connection and forgets them.
func (p *rawPeer) close() {
	_ = p.ln.Close()
	<-p.done
	p.dropAll()
	for len(p.accepted) > 0 {
		<-p.accepted
	}
}

// dropAll closes every connection accepted so far.
func (p *rawPeer) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// next returns the next accepted connection once its subscriber has sent
// its greeting, READY and a subscription.
func (p *rawPeer) next(t testing.TB) *rawConn {
	t.Helper()
	c := p.accept(t)
	for {
		frames, err := c.readMsg()
		if err != nil {
			t.Fatalf("raw peer: %v", err)
		}
		if len(frames) == 1 && len(frames[0]) > 0 && frames[0][0] == 1 {
			return c
		}
	}
}

// accept returns the next accepted connection once its peer's greeting
// has been read.
func (p *rawPeer) accept(t testing.TB) *rawConn {
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

// readMsg reads the next message, skipping commands (READY).
func (c *rawConn) readMsg() ([][]byte, error) {
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

// send writes raw bytes; an error (the listener dropped the connection) is
// returned, not fatal: abuse tests expect it.
func (c *rawConn) send(b []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(b)
	return err
}

// awaitClosed reads until the listener closes the connection (EOF or
// reset), failing the test after 10 s.
func (c *rawConn) awaitClosed(t testing.TB) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("raw peer: the listener kept the connection open")
	}
}
