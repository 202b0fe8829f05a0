package zmqin

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// readHex reads an annotated hex fixture: whitespace-separated hex byte
// pairs, "..." tokens for ASCII text, and # comments to the end of a line.
func readHex(t testing.TB, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for ln, line := range strings.Split(string(src), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for len(line) > 0 {
			line = strings.TrimLeft(line, " \t\r")
			if line == "" {
				break
			}
			if line[0] == '"' {
				end := strings.IndexByte(line[1:], '"')
				if end < 0 {
					t.Fatalf("%s:%d: unterminated string", name, ln+1)
				}
				out = append(out, line[1:1+end]...)
				line = line[end+2:]
				continue
			}
			tok, rest, _ := strings.Cut(line, " ")
			b, err := hex.DecodeString(tok)
			if err != nil || len(b) != 1 {
				t.Fatalf("%s:%d: bad byte %q", name, ln+1, tok)
			}
			out = append(out, b...)
			line = rest
		}
	}
	return out
}

func bh(seed uint64, toks ...uint32) uint64 { return radix.BlockHash(toks, seed) }

// specTokens are the 8 token ids of the vllm_*_stored.hex batch (ids 5..8
// chosen to fill its byte counts, see the fixture).
var specTokens = []uint32{35222, 149213, 16543, 66864, 123456, 12345, 100000, 131072}

func specStoredEvent(w radix.WorkerKey) radix.Event {
	return radix.Event{
		Worker: w, Kind: radix.Stored, Tier: radix.TierDevice,
		Blocks: []radix.Block{
			{Hash: 0x0abc434277575238, Local: radix.BlockHash(specTokens[0:4], radix.Seed)},
			{Hash: 0x951c1780b774a60b, Local: radix.BlockHash(specTokens[4:8], radix.Seed)},
		},
	}
}

func TestGoldenDecode(t *testing.T) {
	listener := radix.WorkerKey{WorkerID: 7, DPRank: 3}
	at := func(rank uint32) radix.WorkerKey { return radix.WorkerKey{WorkerID: 7, DPRank: rank} }
	const ts = 1700000000.5
	tests := []struct {
		file      string
		blockSize int
		size      int // expected payload length, 0: unchecked
		want      Batch
	}{
		{
			file: "vllm_map_stored.hex", blockSize: 4, size: 228,
			want: Batch{Timestamp: ts, HasDPRank: true, Events: []radix.Event{specStoredEvent(at(0))}},
		},
		{
			file: "vllm_array_stored.hex", blockSize: 4, size: 107,
			want: Batch{Timestamp: ts, HasDPRank: true, Events: []radix.Event{specStoredEvent(at(0))}},
		},
		{
			file: "sglang_array_signed.hex", blockSize: 4,
			want: Batch{Timestamp: ts, DPRank: 1, HasDPRank: true, Events: []radix.Event{
				{Worker: at(1), Kind: radix.Stored, Tier: radix.TierHostPinned,
					ParentHash: 0xfffffffffffffffe, HasParent: true,
					Blocks: []radix.Block{{Hash: 0x8000000000000001, Local: bh(radix.Seed, 1, 2, 3, 4)}}},
				{Worker: at(1), Kind: radix.Removed, Tier: radix.TierDevice, Hashes: []uint64{0x8000000000000001}},
			}},
		},
		{
			file: "vllm_v08_short.hex", blockSize: 4,
			want: Batch{Timestamp: ts, Events: []radix.Event{
				{Worker: listener, Kind: radix.Stored, Tier: radix.TierDevice, Blocks: []radix.Block{
					{Hash: 5, Local: bh(radix.Seed, 1, 2, 3, 4)},
					{Hash: 0xffffffffffffffff, Local: bh(radix.Seed, 5, 6, 7, 8)},
				}},
				{Worker: listener, Kind: radix.Removed, Tier: radix.TierDevice, Hashes: []uint64{5}},
				{Worker: listener, Kind: radix.Cleared},
			}},
		},
		{
			file: "drops.hex", blockSize: 4,
			want: Batch{Timestamp: ts, Events: []radix.Event{
				{Worker: listener, Kind: radix.Removed, Tier: radix.TierDisk, Hashes: []uint64{0x0102030405060708}},
			}, Skipped: DropCounts{
				DropUnknownTag: 1, DropBlockSizeMismatch: 1, DropUnknownMedium: 1, DropTokenCount: 1, DropMalformed: 1,
			}},
		},
		{
			file: "map_any_order.hex", blockSize: 16,
			want: Batch{Timestamp: ts, DPRank: 5, HasDPRank: true, Events: []radix.Event{
				{Worker: at(5), Kind: radix.Stored, Tier: radix.TierDevice, ParentHash: 42, HasParent: true,
					Blocks: []radix.Block{{Hash: 0xffffffffffffffff, Local: 16700703466399747636}}},
				{Worker: at(5), Kind: radix.Cleared},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			payload := readHex(t, tt.file)
			if tt.size != 0 && len(payload) != tt.size {
				t.Fatalf("fixture has %d bytes, its header says %d", len(payload), tt.size)
			}
			d := NewDecoder(tt.blockSize)
			got, err := d.Decode(payload, listener)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			// A second decode into the warm decoder gives the same batch.
			again, err := d.Decode(payload, listener)
			if err != nil || !reflect.DeepEqual(again, tt.want) {
				t.Errorf("second decode differs: %+v, %v", again, err)
			}
		})
	}
}

// TestGoldenEncode checks that the encoder writes the fixtures' bytes
// exactly, in both encodings.
func TestGoldenEncode(t *testing.T) {
	b := &WireBatch{
		Timestamp: 1700000000.5, HasDPRank: true,
		Events: []WireEvent{{
			Kind:        radix.Stored,
			BlockHashes: []uint64{0x0abc434277575238, 0x951c1780b774a60b},
			TokenIDs:    specTokens, BlockSize: 4, Medium: "GPU", SpecKind: "full_attention",
		}},
	}
	for _, tc := range []struct {
		file string
		enc  Encoder
	}{
		{"vllm_map_stored.hex", Encoder{Encoding: EncodingMap}},
		{"vllm_array_stored.hex", Encoder{Encoding: EncodingArray}},
	} {
		want := readHex(t, tc.file)
		if got := tc.enc.AppendBatch(nil, b); !bytes.Equal(got, want) {
			t.Errorf("%s:\ngot  % x\nwant % x", tc.file, got, want)
		}
	}
}
