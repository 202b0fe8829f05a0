package zmqin

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

func TestParseFrames(t *testing.T) {
	seq8 := []byte{0, 0, 0, 0, 0, 0, 0x01, 0x02}
	s, p, err := ParseFrames([][]byte{[]byte("kv-events"), seq8, []byte{0x90}})
	if err != nil || s != 0x0102 || len(p) != 1 {
		t.Fatalf("ParseFrames = %d, %x, %v", s, p, err)
	}
	s, _, err = ParseFrames([][]byte{nil, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, nil})
	if err != nil || s != ReplayEndSeq {
		t.Fatalf("end marker: %d, %v", s, err)
	}
	for _, frames := range [][][]byte{
		nil,
		{seq8, []byte{0x90}},
		{nil, seq8, []byte{0x90}, nil},
		{nil, seq8[:7], []byte{0x90}},
		{nil, append(seq8, 0), []byte{0x90}},
	} {
		if _, _, err := ParseFrames(frames); !errors.Is(err, ErrFrames) {
			t.Errorf("ParseFrames(%d frames) error = %v, want ErrFrames", len(frames), err)
		}
	}
}

func TestParseMedium(t *testing.T) {
	for s, want := range map[string]radix.Tier{
		"": radix.TierDevice, "GPU": radix.TierDevice, "DEVICE": radix.TierDevice, "gpu": radix.TierDevice,
		"CPU": radix.TierHostPinned, "CPU_PINNED": radix.TierHostPinned, "CPU_TIER1": radix.TierHostPinned,
		"CPU_TIER2": radix.TierDisk, "DISK": radix.TierDisk, "NVME": radix.TierDisk, "STORAGE": radix.TierDisk,
		"EXTERNAL": radix.TierExternal, "NETWORK": radix.TierExternal, "REMOTE": radix.TierExternal, "SHARED": radix.TierExternal,
	} {
		if got, ok := ParseMedium([]byte(s)); !ok || got != want {
			t.Errorf("ParseMedium(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"TPU", "GPU ", "CPU_TIER3", "A_VERY_LONG_MEDIUM_NAME"} {
		if _, ok := ParseMedium([]byte(s)); ok {
			t.Errorf("ParseMedium(%q) accepted", s)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	ts := []byte{0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x20, 0x00, 0x00}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	for name, p := range map[string][]byte{
		"empty":            nil,
		"invalid byte":     {0xc1},
		"nil":              {0xc0},
		"empty array":      {0x90},
		"one element":      cat([]byte{0x91}, ts),
		"string ts":        {0x92, 0xa1, 'x', 0x90},
		"events not array": cat([]byte{0x92}, ts, []byte{0xa1, 'x'}),
		"negative rank":    cat([]byte{0x93}, ts, []byte{0x90, 0xff}),
		"rank too large":   cat([]byte{0x93}, ts, []byte{0x90, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0}),
		"string rank":      cat([]byte{0x93}, ts, []byte{0x90, 0xa1, '0'}),
		"trailing bytes":   cat([]byte{0x93}, ts, []byte{0x90, 0x00, 0x00}),
		"huge events":      cat([]byte{0x92}, ts, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}),
		"huge hashes":      cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xab}, []byte("BlockStored"), []byte{0xdd, 0x7f, 0xff, 0xff, 0xff}),
		"huge map":         cat([]byte{0x92}, ts, []byte{0x91, 0xdf, 0xff, 0xff, 0xff, 0xff}),
		"huge str":         cat([]byte{0x92}, ts, []byte{0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}),
		"truncated hash":   cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xac}, []byte("BlockRemoved"), []byte{0x91, 0xcf, 1, 2}),
		"map no events":    {0x81, 0xa2, 't', 's', 0x00},
		"ext truncated":    cat([]byte{0x92}, ts, []byte{0x91, 0xc7, 0x05, 0x01, 0x00}),
		"deep nesting":     cat([]byte{0x92}, ts, []byte{0x91}, repeat(0x91, 10000)),
	} {
		d := NewDecoder(4)
		b, err := d.Decode(p, radix.WorkerKey{})
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error = %v, want ErrMalformed", name, err)
		}
		if len(b.Events) != 0 || d.Stats().Malformed != 1 {
			t.Errorf("%s: events %d, stats %+v", name, len(b.Events), d.Stats())
		}
	}
}

func repeat(b byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b
	}
	return p
}

// TestDecodeTolerated covers well-formed batches whose odd events are
// dropped or tolerated rather than failing the batch.
func TestDecodeTolerated(t *testing.T) {
	enc := func(evs ...[]byte) []byte {
		p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}
		p = msgpack.AppendArrayHeader(p, len(evs))
		for _, e := range evs {
			p = append(p, e...)
		}
		return append(p, 0xc0)
	}
	str := func(s string) []byte { return msgpack.AppendStr(nil, s) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	// stored builds a BlockStored array of n fields after the tag.
	stored := func(n int, body ...[]byte) []byte {
		return cat(msgpack.AppendArrayHeader(nil, n+1), str("BlockStored"), cat(body...))
	}
	four := []byte{0x94, 1, 2, 3, 4}
	for _, tc := range []struct {
		name    string
		payload []byte
		events  int
		drop    DropReason
	}{
		{"string hash", enc(stored(4, []byte{0x91}, str("x"), []byte{0xc0}, four, []byte{4})), 0, DropMalformed},
		{"float hash", enc(stored(4, []byte{0x91, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{0xc0}, four, []byte{4})), 0, DropMalformed},
		{"negative token", enc(stored(4, []byte{0x91, 1, 0xc0, 0x94, 1, 2, 3, 0xff, 4})), 0, DropMalformed},
		{"token > u32", enc(stored(4, []byte{0x91, 1, 0xc0, 0x94, 1, 2, 3, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 4})), 0, DropMalformed},
		{"missing block_size", enc(stored(3, []byte{0x91, 1, 0xc0}, four)), 0, DropBlockSizeMismatch},
		{"missing hashes", enc(cat([]byte{0x91}, str("BlockStored"))), 0, DropMalformed},
		{"no tag", enc([]byte{0x90}), 0, DropMalformed},
		{"int tag", enc([]byte{0x91, 0x01}), 0, DropMalformed},
		{"map without type", enc(cat([]byte{0x81}, str("block_hashes"), []byte{0x90})), 0, DropMalformed},
		{"empty removed", enc(cat([]byte{0x92}, str("BlockRemoved"), []byte{0x90})), 0, DropEmpty},
		{"empty stored", enc(stored(4, []byte{0x90, 0xc0, 0x90, 4})), 0, DropEmpty},
		{"int medium", enc(cat([]byte{0x93}, str("BlockRemoved"), []byte{0x91, 1, 7})), 0, DropMalformed},
		{"remote locality", enc(cat([]byte{0x83}, str("type"), str("BlockRemoved"), str("block_hashes"), []byte{0x91, 1}, str("locality"), str("REMOTE"))), 0, DropNonLocal},
		{"nil locality", enc(cat([]byte{0x83}, str("type"), str("BlockRemoved"), str("block_hashes"), []byte{0x91, 1}, str("locality"), []byte{0xc0})), 1, 0},
		{"empty medium is device", enc(cat([]byte{0x93}, str("BlockRemoved"), []byte{0x91, 1}, str(""))), 1, 0},
		{"eagle bigrams", enc(stored(4, []byte{0x91, 1, 0xc0, 0x94, 0x92, 1, 2, 0x92, 2, 3, 0x92, 3, 4, 0x92, 4, 5, 4})), 1, 0},
		{"empty bigram", enc(stored(4, []byte{0x91, 1, 0xc0, 0x94, 0x90, 0x92, 2, 3, 0x92, 3, 4, 0x92, 4, 5, 4})), 0, DropMalformed},
		{"sglang salt metadata", enc(stored(7, []byte{0x91, 1, 0xc0}, four, []byte{4, 0xc0}, str("GPU"), []byte{0x81}, str("cache_salt"), str("s"))), 1, 0},
		{"ext and nested extras", enc(stored(9, []byte{0x91, 1, 0xc0}, four, []byte{4, 0xc0, 0xc0, 0xc0, 0x91, 0xd6, 1, 0, 0, 0, 0, 0x81, 0x90, 0x91, 0xc3})), 1, 0},
	} {
		d := NewDecoder(4)
		b, err := d.Decode(tc.payload, radix.WorkerKey{})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(b.Events) != tc.events {
			t.Errorf("%s: %d events, want %d", tc.name, len(b.Events), tc.events)
		}
		if tc.events == 0 && b.Skipped[tc.drop] != 1 {
			t.Errorf("%s: skipped %v, want one %v", tc.name, b.Skipped, tc.drop)
		}
	}
	// An EAGLE bigram list hashes like its first elements.
	d := NewDecoder(4)
	b, _ := d.Decode(enc(stored(4, []byte{0x91, 1, 0xc0, 0x94, 0x92, 1, 2, 0x92, 2, 3, 0x92, 3, 4, 0x92, 4, 5, 4})), radix.WorkerKey{})
	if got, want := b.Events[0].Blocks[0].Local, bh(radix.Seed, 1, 2, 3, 4); got != want {
		t.Errorf("bigram local hash %x, want %x", got, want)
	}
}

// TestDecodeTruncated: every strict prefix of a valid batch is malformed.
func TestDecodeTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, enc := range allEncoders() {
		wb := randomBatch(rng, 4)
		p := enc.AppendBatch(nil, wb)
		d := NewDecoder(4)
		for n := 0; n < len(p); n++ {
			if _, err := d.Decode(p[:n], radix.WorkerKey{}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%+v: prefix %d of %d: error %v", enc, n, len(p), err)
			}
		}
	}
}

func allEncoders() []Encoder {
	var out []Encoder
	for _, e := range []Encoding{EncodingArray, EncodingMap} {
		for _, h := range []HashForm{HashUnsigned, HashSigned, HashBytes} {
			for _, legacy := range []bool{false, true} {
				out = append(out, Encoder{Encoding: e, Hashes: h, LegacyBatch: legacy})
			}
		}
	}
	return out
}

var media = []string{"", "GPU", "CPU", "CPU_TIER2", "DISK", "EXTERNAL", "cpu_pinned", "TPU_HBM"}

// randomBatch makes a batch whose events are mostly valid for blockSize,
// with some wrong block sizes, token counts, empty events and unknown media.
func randomBatch(rng *rand.Rand, blockSize int) *WireBatch {
	b := &WireBatch{Timestamp: rng.Float64() * 2e9, DPRank: uint32(rng.IntN(4)), HasDPRank: rng.IntN(3) > 0}
	if rng.IntN(10) == 0 {
		b.DPRank = rng.Uint32()
	}
	n := rng.IntN(20)
	for range n {
		var e WireEvent
		switch k := rng.IntN(10); {
		case k < 6:
			e.Kind = radix.Stored
		case k < 9:
			e.Kind = radix.Removed
		default:
			e.Kind = radix.Cleared
		}
		if e.Kind == radix.Cleared {
			b.Events = append(b.Events, e)
			continue
		}
		nb := rng.IntN(6)
		if rng.IntN(8) == 0 {
			nb = 20 // a 16-bit array header
		}
		for range nb {
			e.BlockHashes = append(e.BlockHashes, randomU64(rng))
		}
		e.Medium = media[rng.IntN(len(media))]
		e.GroupIdx = []uint32{0, 0, 0, 1, 2}[rng.IntN(5)]
		if e.Kind == radix.Stored {
			e.SpecKind = []string{"", "full_attention", "full_attention", "sliding_window", "mla_attention", "weird_kind"}[rng.IntN(6)]
			e.BlockSize = blockSize
			if rng.IntN(10) == 0 {
				e.BlockSize = blockSize * 2
			}
			nt := nb * e.BlockSize
			if rng.IntN(10) == 0 {
				nt++
			}
			for range nt {
				e.TokenIDs = append(e.TokenIDs, uint32(randomU64(rng)))
			}
			e.ParentHash, e.HasParent = randomU64(rng), rng.IntN(2) == 0
			e.LoraName = []string{"", "", "my-adapter", "another-adapter-with-a-name-longer-than-32-bytes"}[rng.IntN(4)]
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// randomU64 spreads values over every msgpack integer width.
func randomU64(rng *rand.Rand) uint64 {
	switch rng.IntN(6) {
	case 0:
		return uint64(rng.IntN(128))
	case 1:
		return uint64(rng.IntN(256))
	case 2:
		return uint64(rng.IntN(65536))
	case 3:
		return uint64(rng.Uint32())
	case 4:
		return ^uint64(rng.IntN(40)) // small negative as int64
	}
	return rng.Uint64()
}

// refModel is a straight transcription of the conversion and group rules,
// the model the decoder is checked against. groups is the learned kind of
// each (rank, group_idx): "main", "other" or "unknown".
type refModel struct {
	groups map[[2]uint32]string
}

func refKind(s string) string {
	switch s {
	case "":
		return ""
	case "full_attention", "mla_attention", "sink_full_attention":
		return "main"
	case "sliding_window", "sliding_window_mla", "mamba", "chunked_local_attention",
		"encoder_only_attention", "cross_attention":
		return "other"
	}
	return "unknown"
}

// groupDrop applies the group rules to an event that passed conversion.
func (m *refModel) groupDrop(rank uint32, e *WireEvent, out *Batch) bool {
	kind := ""
	if e.Kind == radix.Stored {
		kind = refKind(e.SpecKind)
		if kind != "" {
			m.groups[[2]uint32{rank, e.GroupIdx}] = kind
		}
	}
	if kind == "" {
		learned, ok := m.groups[[2]uint32{rank, e.GroupIdx}]
		switch {
		case ok:
			kind = learned
		case e.GroupIdx == 0:
			return false
		default:
			out.Skipped[DropUnlearnedGroup]++
			return true
		}
	}
	switch kind {
	case "main":
		return false
	case "other":
		out.Skipped[DropNonMainAttention]++
	default:
		out.Skipped[DropUnknownKind]++
	}
	return true
}

func (m *refModel) batch(b *WireBatch, legacy bool, blockSize int, listener radix.WorkerKey) Batch {
	out := Batch{Timestamp: b.Timestamp}
	w := listener
	if !legacy && b.HasDPRank {
		out.DPRank, out.HasDPRank = b.DPRank, true
		w.DPRank = b.DPRank
	}
	for _, e := range b.Events {
		if e.Kind == radix.Cleared {
			out.Events = append(out.Events, radix.Event{Worker: w, Kind: radix.Cleared})
			continue
		}
		tier, ok := ParseMedium([]byte(e.Medium))
		switch {
		case !ok:
			out.Skipped[DropUnknownMedium]++
		case e.Kind == radix.Removed && len(e.BlockHashes) == 0:
			out.Skipped[DropEmpty]++
		case e.Kind == radix.Removed && m.groupDrop(w.DPRank, &e, &out):
		case e.Kind == radix.Removed:
			out.Events = append(out.Events, radix.Event{Worker: w, Kind: radix.Removed, Tier: tier, Hashes: e.BlockHashes})
		case e.BlockSize != blockSize:
			out.Skipped[DropBlockSizeMismatch]++
		case len(e.TokenIDs) != len(e.BlockHashes)*blockSize:
			out.Skipped[DropTokenCount]++
		case len(e.BlockHashes) == 0:
			out.Skipped[DropEmpty]++
		case m.groupDrop(w.DPRank, &e, &out):
		default:
			ev := radix.Event{Worker: w, Kind: radix.Stored, Tier: tier, ParentHash: e.ParentHash, HasParent: e.HasParent}
			for i, h := range e.BlockHashes {
				ev.Blocks = append(ev.Blocks, radix.Block{
					Hash:  h,
					Local: radix.BlockHash(e.TokenIDs[i*blockSize:(i+1)*blockSize], radix.HashSeed(e.LoraName, "")),
				})
			}
			if !e.HasParent {
				ev.ParentHash = 0
			}
			out.Events = append(out.Events, ev)
		}
	}
	return out
}

// TestRoundTrip encodes random batches in every encoding, decodes them with
// one reused decoder and compares with the reference conversion.
func TestRoundTrip(t *testing.T) {
	const seed = 20260101
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const blockSize = 4
	listener := radix.WorkerKey{WorkerID: 99, DPRank: 2}
	d := NewDecoder(blockSize)
	model := &refModel{groups: map[[2]uint32]string{}}
	var buf []byte
	var wantEvents uint64
	for i := range 3000 {
		enc := allEncoders()[rng.IntN(12)]
		wb := randomBatch(rng, blockSize)
		buf = enc.AppendBatch(buf[:0], wb)
		got, err := d.Decode(buf, listener)
		if err != nil {
			t.Fatalf("batch %d (%+v): %v", i, enc, err)
		}
		want := model.batch(wb, enc.LegacyBatch, blockSize, listener)
		if len(want.Events) == 0 {
			want.Events = got.Events[:0:0]
			if got.Events == nil {
				want.Events = nil
			}
		}
		if len(got.Events) == 0 && len(want.Events) == 0 {
			got.Events, want.Events = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d (%+v):\ngot  %+v\nwant %+v", i, enc, got, want)
		}
		wantEvents += uint64(len(want.Events))
	}
	if s := d.Stats(); s.Batches != 3000 || s.Events != wantEvents || s.Malformed != 0 {
		t.Errorf("stats %+v, want 3000 batches, %d events", s, wantEvents)
	}
}

// TestDecodeZeroAlloc: a warm decoder allocates nothing per batch, in both
// encodings and with a LoRA name.
func TestDecodeZeroAlloc(t *testing.T) {
	for _, enc := range []Encoder{{Encoding: EncodingArray}, {Encoding: EncodingMap, Hashes: HashBytes}} {
		wb := typicalBatch(16)
		for i := range wb.Events {
			wb.Events[i].LoraName = "my-adapter"
		}
		p := enc.AppendBatch(nil, wb)
		d := NewDecoder(16)
		w := radix.WorkerKey{WorkerID: 1}
		if b, err := d.Decode(p, w); err != nil || len(b.Events) != 17 {
			t.Fatalf("%+v: %d events, %v", enc, len(b.Events), err)
		}
		if n := testing.AllocsPerRun(100, func() { d.Decode(p, w) }); n != 0 {
			t.Errorf("%+v: %v allocs per Decode, want 0", enc, n)
		}
	}
}

// typicalBatch is one scheduler step of a busy vLLM engine: 16 BlockStored
// events of 4 full blocks each plus one BlockRemoved.
func typicalBatch(blockSize int) *WireBatch {
	rng := rand.New(rand.NewPCG(7, 7))
	b := &WireBatch{Timestamp: 1700000000.5, HasDPRank: true}
	parent := rng.Uint64()
	for range 16 {
		e := WireEvent{Kind: radix.Stored, BlockSize: blockSize, Medium: "GPU", ParentHash: parent, HasParent: true, SpecKind: "full_attention"}
		for range 4 {
			e.BlockHashes = append(e.BlockHashes, rng.Uint64())
		}
		for range 4 * blockSize {
			e.TokenIDs = append(e.TokenIDs, uint32(rng.IntN(152000)))
		}
		parent = e.BlockHashes[3]
		b.Events = append(b.Events, e)
	}
	b.Events = append(b.Events, WireEvent{Kind: radix.Removed, BlockHashes: []uint64{rng.Uint64()}, Medium: "GPU"})
	return b
}
