package zmtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestRecvIntoAlloc: RecvInto reads a stream of two-frame messages of up
// to 64 KiB into the previous message's bodies, so the stream costs no
// allocation per message once the bodies have grown to the largest (the
// payloads take long frame headers, read without allocating too); each
// message reads back exactly; Recv still hands out fresh bodies; and a
// frame over 64 KiB is a fresh body, not kept for reuse.
func TestRecvIntoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; make test runs this without -race")
	}
	const runs = 200
	// The first payload is the largest (2,600 bytes): the bodies grow to
	// it once, and every later message fits.
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 2600-i%500) }
	var stream []byte
	want := make([][]byte, runs)
	for i := range runs {
		want[i] = payload(i)
		stream = append(stream, rawMsg([]byte("replica"), want[i])...)
	}
	c := &Conn{bc: &bufConn{r: bufio.NewReaderSize(bytes.NewReader(stream), 64<<10), w: bufio.NewWriter(io.Discard)},
		lim: Limits{MaxFrames: 2, MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 20}}
	frames := make([][]byte, 0, 2)
	var err error
	if frames, err = c.RecvInto(frames); err != nil || len(frames) != 2 || !bytes.Equal(frames[1], want[0]) {
		t.Fatalf("first message: %d frames, %v", len(frames), err)
	}
	first := &frames[1][0]
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 1; i < runs; i++ {
		if frames, err = c.RecvInto(frames); err != nil || len(frames) != 2 || string(frames[0]) != "replica" || !bytes.Equal(frames[1], want[i]) {
			t.Fatalf("message %d: %d frames, %v", i, len(frames), err)
		}
		if &frames[1][0] != first {
			t.Fatalf("message %d: a fresh body, not the last one's", i)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.Mallocs - before.Mallocs; got > 2 {
		t.Fatalf("%d allocations for %d messages read into reused bodies", got, runs-1)
	}

	// Recv: fresh bodies, an empty frame too; a large frame: never reused.
	big := make([]byte, 100<<10)
	stream = append(rawMsg([]byte("a"), []byte("bc")), rawMsg([]byte("a"), nil)...)
	stream = append(stream, rawMsg([]byte("a"), big)...)
	stream = append(stream, rawMsg([]byte("a"), []byte("de"))...)
	c.bc.r = bufio.NewReaderSize(bytes.NewReader(stream), 4096)
	kept := frames[1]
	if frames, err = c.Recv(frames); err != nil || string(frames[1]) != "bc" || &frames[1][0] == &kept[:1][0] {
		t.Fatalf("Recv: %q, %v (fresh: %v)", frames, err, &frames[1][0] != &kept[:1][0])
	}
	if frames, err = c.Recv(frames); err != nil || frames[1] == nil || len(frames[1]) != 0 {
		t.Fatalf("Recv of an empty frame: %v, %v; want an empty, non-nil body", frames[1] == nil, err)
	}
	if frames, err = c.RecvInto(frames); err != nil || len(frames[1]) != len(big) {
		t.Fatalf("large frame: %d bytes, %v", len(frames[1]), err)
	}
	bigBody := frames[1]
	if frames, err = c.RecvInto(frames); err != nil || string(frames[1]) != "de" || &frames[1][0] == &bigBody[0] {
		t.Fatalf("after the large frame: %q, %v; want a fresh small body", frames[1], err)
	}

	// A long header cut short is an unexpected EOF, as io.ReadFull says.
	c.bc.r = bufio.NewReaderSize(bytes.NewReader([]byte{flagLong, 0, 0, 1}), 4096)
	if _, err = c.RecvInto(frames); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a truncated long header: %v, want io.ErrUnexpectedEOF", err)
	}
}

// BenchmarkRecv reads two-frame messages of a 2.3 KB payload (a replica
// booking with 274 block hashes) from memory, with fresh bodies (Recv)
// and reused ones (RecvInto).
func BenchmarkRecv(b *testing.B) {
	msg := rawMsg([]byte("replica"), make([]byte, 2300))
	for _, into := range []bool{false, true} {
		b.Run(map[bool]string{false: "fresh", true: "into"}[into], func(b *testing.B) {
			stream := bytes.Repeat(msg, 1024)
			rd := bytes.NewReader(stream)
			c := &Conn{bc: &bufConn{r: bufio.NewReaderSize(rd, 64<<10), w: bufio.NewWriter(io.Discard)},
				lim: Limits{MaxFrames: 2, MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 20}}
			frames := make([][]byte, 0, 2)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%1024 == 0 {
					rd.Reset(stream)
					c.bc.r.Reset(rd)
				}
				var err error
				if into {
					frames, err = c.RecvInto(frames)
				} else {
					frames, err = c.Recv(frames)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
