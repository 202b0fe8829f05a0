package main

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvselect/kvselect/bench/extproc"
	"github.com/kvselect/kvselect/httpapi/epp"
)

// h2Windows opens an HTTP/2 connection on c (the client preface and an
// empty SETTINGS) and reads the server's first frames: its
// SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113 §6.5.2, 65,535 when absent) and
// the connection window, 65,535 plus its WINDOW_UPDATEs on stream 0 that
// arrive before the server acknowledges our SETTINGS.
func h2Windows(t *testing.T, c net.Conn) (stream, conn uint32) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	stream, conn = 65535, 65535
	for {
		var h [9]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags, sid := h[3], h[4], binary.BigEndian.Uint32(h[5:])&0x7fffffff
		p := make([]byte, n)
		if _, err := io.ReadFull(c, p); err != nil {
			t.Fatal(err)
		}
		switch {
		case typ == 0x4 && flags&0x1 != 0: // SETTINGS ack: the server has sent its own
			return stream, conn
		case typ == 0x4:
			for i := 0; i+6 <= len(p); i += 6 {
				if binary.BigEndian.Uint16(p[i:]) == 0x4 {
					stream = binary.BigEndian.Uint32(p[i+2:])
				}
			}
		case typ == 0x8 && sid == 0:
			conn += binary.BigEndian.Uint32(p) & 0x7fffffff
		}
	}
}

// TestEppHTTP2Windows: the picker as a user starts it (default flags: TLS
// with its self-signed certificate) advertises httpapi/epp's fixed windows,
// not grpc-go's 64 KiB start, and the bench's no-op baseline advertises
// the same ones.
func TestEppHTTP2Windows(t *testing.T) {
	if extproc.StreamWindow != epp.StreamWindow || extproc.ConnWindow != epp.ConnWindow {
		t.Fatalf("no-op windows %d/%d, picker's %d/%d", extproc.StreamWindow, extproc.ConnWindow, epp.StreamWindow, epp.ConnWindow)
	}
	p := startEppProc(t)
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.grpc), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, w := h2Windows(t, c); s != epp.StreamWindow || w != epp.ConnWindow {
		t.Errorf("picker: stream window %d, connection window %d; want %d and %d", s, w, epp.StreamWindow, epp.ConnWindow)
	}

	addr, stop, err := extproc.StartNoop("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if s, w := h2Windows(t, nc); s != epp.StreamWindow || w != epp.ConnWindow {
		t.Errorf("no-op: stream window %d, connection window %d; want %d and %d", s, w, epp.StreamWindow, epp.ConnWindow)
	}
}
