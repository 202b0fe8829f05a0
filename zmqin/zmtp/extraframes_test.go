package zmtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestRecvExtraFramesAlloc: the frames of a message past MaxFrames are
// read and discarded, never buffered: receiving a message of 3 small
// frames and 100 of 64 KiB (6.4 MB on the wire) allocates a few KiB, not
// the frames, and the next message is read whole from the same stream.
func TestRecvExtraFramesAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; make test runs this without -race")
	}
	big := make([]byte, 64<<10)
	var stream []byte
	const runs = 10
	for range runs {
		stream = append(stream, rawFrame(true, []byte("kv"))...)
		stream = append(stream, rawFrame(true, make([]byte, 8))...) // a seq
		stream = append(stream, rawFrame(true, []byte{0x90})...)
		for range 99 {
			stream = append(stream, rawFrame(true, big)...)
		}
		stream = append(stream, rawFrame(false, big)...)
		stream = append(stream, rawMsg([]byte("kv"), make([]byte, 8), []byte{0x91, 0x01})...)
	}
	c := &Conn{bc: &bufConn{r: bufio.NewReaderSize(bytes.NewReader(stream), 4096), w: bufio.NewWriter(io.Discard)},
		lim: Limits{MaxFrames: 3, MaxFrameSize: 1 << 20, MaxMessageSize: 64 << 20}} // a live KV message's [topic, seq, payload]
	frames := make([][]byte, 0, 4)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range runs {
		var err error
		if frames, err = c.Recv(frames); !errors.Is(err, ErrExtraFrames) || len(frames) != 0 {
			t.Fatalf("run %d: %d frames, %v; want the message dropped", i, len(frames), err)
		}
		if frames, err = c.Recv(frames); err != nil || len(frames) != 3 || !bytes.Equal(frames[2], []byte{0x91, 0x01}) {
			t.Fatalf("run %d: the message after: %q, %v", i, frames, err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > runs*16<<10 {
		t.Fatalf("%d bytes allocated for %d dropped messages of 6.4 MB: the extra frames were buffered", got, runs)
	}
}
