package zmtp

import (
	"errors"
	"testing"
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
