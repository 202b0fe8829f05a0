package zmqin

import (
	"errors"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

func TestScanFrames(t *testing.T) {
	c := &bufConn{maxFrame: 300, skip: greetingLen}
	stream := make([]byte, greetingLen)
	stream = append(stream, 0x00, 3, 'a', 'b', 'c')           // short frame
	stream = append(stream, 0x02, 0, 0, 0, 0, 0, 0, 1, 0)     // long frame of 256
	stream = append(stream, make([]byte, 256)...)             // its body
	stream = append(stream, 0x04, 5, 'R', 'E', 'A', 'D', 'Y') // command
	for i := range stream {                                   // byte by byte: splitting must not matter
		if err := c.scan(stream[i : i+1]); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if err := c.scan([]byte{0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
}

// TestEvBufPoolBound: an event buffer that grew past maxPooledEvBytes (a
// batch copied from a huge message) would not be pooled; ordinary ones
// would. (The predicate is tested: sync.Pool drops items at random under
// the race detector.)
func TestEvBufPoolBound(t *testing.T) {
	small := &evBuf{blocks: make([]radix.Block, 0, 256), hashes: make([]uint64, 0, 64)}
	if small.retained() > maxPooledEvBytes {
		t.Fatalf("an ordinary buffer (%d bytes) would not be pooled", small.retained())
	}
	huge := &evBuf{blocks: make([]radix.Block, 0, maxPooledEvBytes/16+1)}
	if huge.retained() <= maxPooledEvBytes {
		t.Fatalf("a buffer retaining %d bytes would be pooled", huge.retained())
	}
}
