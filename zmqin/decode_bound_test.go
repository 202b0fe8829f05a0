package zmqin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// arr32 is a msgpack array32 header of n elements followed by n copies of
// the one-byte value v.
func arr32(n int, v byte) []byte {
	p := binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(n))
	return append(p, bytes.Repeat([]byte{v}, n)...)
}

// storedBatch is one batch of one array-form BlockStored (block size 4)
// with the given block_hashes, token_ids and extra_keys encodings.
func storedBatch(hashes, toks, extra []byte) []byte {
	p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x99}
	p = msgpack.AppendStr(p, "BlockStored")
	p = append(p, hashes...)
	p = append(p, 0xc0)
	p = append(p, toks...)
	p = append(p, 4, 0xc0, 0xc0, 0xc0)
	p = append(p, extra...)
	return append(p, 0xc0)
}

// removesBatch is one batch of n array-form BlockRemoved events of hash 1
// (built as bytes: a WireBatch of that many events is slow under -race).
func removesBatch(n int) []byte {
	ev := msgpack.AppendStr([]byte{0x93}, "BlockRemoved")
	ev = append(ev, 0x91, 1, 0xc0)
	p := binary.BigEndian.AppendUint32([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd}, uint32(n))
	return append(p, bytes.Repeat(ev, n)...)
}

// TestDecodeBoundsDecodedMemory: a batch that would decode into more than
// MaxDecodedBatchBytes (events, block hashes, token ids or extra_keys
// strings, each a few times larger decoded than on the wire) is rejected
// as malformed at the header of the array that passes the bound, having
// allocated next to nothing; a batch under the bound decodes, and the
// Decoder goes on decoding after a rejection.
func TestDecodeBoundsDecodedMemory(t *testing.T) {
	const over = MaxDecodedBatchBytes + 1
	one := []byte{0x91, 1}
	fourToks := []byte{0x94, 1, 2, 3, 4}
	firstEntry := append([]byte{0x91}, binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(over/24+1))...)
	firstEntry = append(firstEntry, bytes.Repeat([]byte{0xa0}, over/24+1)...)
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"events", removesBatch(over/eventCost + 1)},
		{"block hashes", storedBatch(arr32(over/blockCost+1, 1), fourToks, []byte{0xc0})},
		{"token ids", storedBatch(one, arr32(over/tokenCost+1, 1), []byte{0xc0})},
		{"extra_keys strings", storedBatch(one, fourToks, firstEntry)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(4)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := d.Decode(c.payload, radix.WorkerKey{WorkerID: 1})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "decodes into more than 64 MiB") {
				t.Fatalf("%d-byte payload: %v", len(c.payload), err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Fatalf("rejecting a %d-byte payload allocated %d bytes", len(c.payload), grew)
			}
			b, err := d.Decode(storedBatch(one, fourToks, []byte{0xc0}), radix.WorkerKey{WorkerID: 1})
			if err != nil || len(b.Events) != 1 || len(b.Events[0].Blocks) != 1 {
				t.Fatalf("after the rejection: %+v, %v", b, err)
			}
		})
	}
	// Under the bound: every event of the largest batch of one-hash
	// removes that fits.
	n := MaxDecodedBatchBytes / (eventCost + blockCost)
	b, err := NewDecoder(4).Decode(removesBatch(n), radix.WorkerKey{WorkerID: 1})
	if err != nil || len(b.Events) != n {
		t.Fatalf("%d removes: %d events, %v", n, len(b.Events), err)
	}
}
