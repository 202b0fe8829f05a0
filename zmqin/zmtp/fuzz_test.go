package zmtp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzScanFrames: the frame-size scanner never panics and gives the same
// verdict however the stream is split into reads.
func FuzzScanFrames(f *testing.F) {
	greeting := make([]byte, greetingLen)
	f.Add(append(append([]byte(nil), greeting...), 0x00, 3, 'a', 'b', 'c', 0x02, 0, 0, 0, 0, 0, 0, 1, 0), uint8(7))
	f.Add(append(append([]byte(nil), greeting...), 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		whole := &bufConn{maxFrame: 300, skip: greetingLen}
		errWhole := whole.scan(stream)
		split := &bufConn{maxFrame: 300, skip: greetingLen}
		var errSplit error
		step := int(chunk%16) + 1
		for i := 0; i < len(stream) && errSplit == nil; i += step {
			errSplit = split.scan(stream[i:min(i+step, len(stream))])
		}
		if (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("verdict depends on read sizes: %v vs %v", errWhole, errSplit)
		}
		if errWhole != nil && !errors.Is(errWhole, ErrFrameTooLarge) {
			t.Fatalf("error %v", errWhole)
		}
	})
}

// FuzzRecv: Conn.Recv, the frame reader of untrusted bytes, never panics
// and agrees with a straightforward reading of the ZMTP framing: the same
// messages, and the same verdict (limit broken, command with MORE, stream
// ended) at the same point; commands, PINGs included, are consumed
// wherever they come; a message of extra frames is skipped and the next
// one read. Limits are small so that the fuzzer reaches them.
func FuzzRecv(f *testing.F) {
	f.Add(cat(rawMsg([]byte("kv"), make([]byte, 8), []byte{0x90}), rawMsg([]byte("x"))))
	f.Add(cat(rawReady("PUB"), rawFrame(true, nil), rawFrame(true, nil), rawFrame(true, nil), rawFrame(false, nil)))
	f.Add(cat(rawFrame(true, make([]byte, 40)), rawFrame(false, make([]byte, 40))))
	f.Add(rawFrameHeader(false, 1<<62))
	f.Add(cat(rawFrame(true, []byte("a")), rawReady("SUB")))
	f.Add(cat(rawFrame(true, []byte("a")), rawCommand("PING", []byte{0, 10, 'c'}), rawFrame(false, []byte("b"))))
	f.Add(cat(rawFrame(true, []byte("a")), rawFrame(true, nil), rawFrame(true, nil), rawFrame(false, []byte("d")), rawMsg([]byte("e"))))
	lim := Limits{MaxFrames: 3, MaxFrameSize: 48, MaxMessageSize: 64, HardFrames: 6}
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := &Conn{bc: &bufConn{r: bufio.NewReaderSize(bytes.NewReader(stream), 16), w: bufio.NewWriter(io.Discard)}, lim: lim}
		ref := refFrames{b: stream, lim: lim}
		var frames [][]byte
		for {
			want, wantErr := ref.next()
			var err error
			frames, err = c.Recv(frames)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errEOF
			}
			if (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, wantErr)) {
				t.Fatalf("Recv error %v, reference %v", err, wantErr)
			}
			if errors.Is(err, ErrExtraFrames) {
				if len(frames) != 0 {
					t.Fatalf("a dropped message returned %d frames", len(frames))
				}
				continue
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(normFrames(frames), normFrames(want)) {
				t.Fatalf("Recv %q, reference %q", frames, want)
			}
		}
	})
}

func normFrames(fs [][]byte) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = append([]byte{}, f...)
	}
	return out
}

// refFrames reads ZMTP frames from b the plain way, with lim.
type refFrames struct {
	b   []byte
	lim Limits
}

// errEOF stands for any end of the stream (io.EOF or io.ErrUnexpectedEOF).
var errEOF = errors.New("end of stream")

func (r *refFrames) next() ([][]byte, error) {
	var msg [][]byte
	total, n := 0, 0
	for {
		if len(r.b) < 2 {
			return nil, errEOF
		}
		flags := r.b[0]
		size, hdr := uint64(r.b[1]), 2
		if flags&flagLong != 0 {
			if len(r.b) < 9 {
				return nil, errEOF
			}
			size, hdr = binary.BigEndian.Uint64(r.b[1:9]), 9
		}
		r.b = r.b[hdr:]
		if flags&flagCommand != 0 {
			if flags&flagMore != 0 {
				return nil, errProtocol
			}
		} else if n++; n > r.lim.HardFrames {
			return nil, ErrTooManyFrames
		}
		if size > uint64(r.lim.MaxFrameSize) {
			return nil, ErrFrameTooLarge
		}
		if flags&flagCommand == 0 {
			if total += int(size); total > r.lim.MaxMessageSize {
				return nil, ErrMessageTooLarge
			}
		}
		if uint64(len(r.b)) < size {
			return nil, errEOF
		}
		body := r.b[:size]
		r.b = r.b[size:]
		if flags&flagCommand != 0 {
			continue
		}
		if n <= r.lim.MaxFrames {
			msg = append(msg, body)
		}
		if flags&flagMore == 0 {
			if n > r.lim.MaxFrames {
				return nil, ErrExtraFrames
			}
			return msg, nil
		}
	}
}
