package zmqin

import (
	"encoding/binary"
	"fmt"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// Encoding is the layout of events inside a batch. The batch itself is
// always a positional array: vLLM's EventBatch stays array_like when its
// events become maps (vllm-project/vllm:vllm/distributed/kv_events.py).
type Encoding uint8

const (
	// EncodingArray writes msgspec array_like tagged arrays with every
	// declared field present: vLLM up to v0.23.x (and `--event-encoding
	// array` after), SGLang before #37482.
	EncodingArray Encoding = iota
	// EncodingMap writes msgspec tagged maps ("type" first, then fields in
	// declaration order, fields equal to their declared default omitted):
	// vLLM after #42892, Dynamo's mocker.
	EncodingMap
)

// HashForm is how block hashes are written.
type HashForm uint8

const (
	// HashUnsigned writes every hash as an unsigned integer (cf for values
	// >= 2^32), as vLLM does in its default int mode.
	HashUnsigned HashForm = iota
	// HashSigned writes hashes >= 2^63 as negative int64 (d3), as SGLang and
	// vLLM before v0.10.2 do.
	HashSigned
	// HashBytes writes each hash as a 32-byte bin whose last 8 bytes are the
	// hash big-endian, like vLLM's sha256 digests with
	// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0.
	HashBytes
)

// WireEvent is one event as an engine publishes it, the encoder's input.
// Kind selects which fields are written: BlockStored uses every field,
// BlockRemoved BlockHashes and Medium, AllBlocksCleared none.
type WireEvent struct {
	Kind        radix.EventKind
	BlockHashes []uint64
	ParentHash  uint64
	HasParent   bool // false: parent_block_hash is nil (the run starts at token 0)
	TokenIDs    []uint32
	BlockSize   int
	Medium      string // "" is written as nil
	LoraName    string // "" is written as nil
	// GroupIdx is the KV-cache group (0 for plain models); always written,
	// as vLLM's GPU block pool does.
	GroupIdx uint32
	// SpecKind is BlockStored's kv_cache_spec_kind, e.g. "full_attention";
	// "" is nil (omitted in map form).
	SpecKind string
}

// WireBatch is one batch as an engine publishes it.
type WireBatch struct {
	Timestamp float64
	Events    []WireEvent
	DPRank    uint32
	HasDPRank bool // false: data_parallel_rank is nil
}

// Encoder appends vLLM-format msgpack KV event batches, byte for byte what
// msgspec writes for vLLM's GPU block pool: BlockStored carries lora_id nil,
// extra_keys one nil per block, group_idx and kv_cache_spec_kind (and, in
// array form, a nil sliding window); BlockRemoved carries group_idx. It is the definition the tests and the simulated
// engines (mocker) share. The zero Encoder writes vLLM's array form with
// unsigned hashes and a 3-element batch.
type Encoder struct {
	Encoding Encoding
	Hashes   HashForm
	// LegacyBatch writes the batch as [ts, events] (before vLLM #18925),
	// dropping the rank.
	LegacyBatch bool
}

// AppendBatch appends the msgpack encoding of b to dst and returns the
// extended slice. It panics on an event Kind other than Stored, Removed and
// Cleared.
func (e Encoder) AppendBatch(dst []byte, b *WireBatch) []byte {
	if e.LegacyBatch {
		dst = append(dst, 0x92)
	} else {
		dst = append(dst, 0x93)
	}
	dst = msgpack.AppendFloat64(dst, b.Timestamp)
	dst = msgpack.AppendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = e.appendEvent(dst, &b.Events[i])
	}
	if !e.LegacyBatch {
		if b.HasDPRank {
			dst = msgpack.AppendUint(dst, uint64(b.DPRank))
		} else {
			dst = append(dst, 0xc0)
		}
	}
	return dst
}

// AppendFrames returns the three frames of a live message for a batch:
// topic, seq as 8 bytes big-endian, payload. The payload is appended to
// payload[:0].
func (e Encoder) AppendFrames(topic string, seq uint64, payload []byte, b *WireBatch) [][]byte {
	var s [SeqLen]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return [][]byte{[]byte(topic), s[:], e.AppendBatch(payload[:0], b)}
}

func (e Encoder) appendEvent(dst []byte, ev *WireEvent) []byte {
	m := e.Encoding == EncodingMap
	switch ev.Kind {
	case radix.Stored:
		if m {
			// 11 keys, 10 without a kind: kv_cache_spec_kind and the
			// sliding window are omitted when nil, their default.
			if ev.SpecKind != "" {
				dst = append(dst, 0x8b)
			} else {
				dst = append(dst, 0x8a)
			}
			dst = msgpack.AppendStr(dst, "type")
		} else {
			dst = append(dst, 0x9c) // 12 fields
		}
		dst = msgpack.AppendStr(dst, "BlockStored")
		dst = e.key(dst, m, "block_hashes")
		dst = e.appendHashes(dst, ev.BlockHashes)
		dst = e.key(dst, m, "parent_block_hash")
		if ev.HasParent {
			dst = e.appendHash(dst, ev.ParentHash)
		} else {
			dst = append(dst, 0xc0)
		}
		dst = e.key(dst, m, "token_ids")
		dst = msgpack.AppendArrayHeader(dst, len(ev.TokenIDs))
		for _, t := range ev.TokenIDs {
			dst = msgpack.AppendUint(dst, uint64(t))
		}
		dst = e.key(dst, m, "block_size")
		dst = msgpack.AppendInt(dst, int64(ev.BlockSize))
		dst = e.key(dst, m, "lora_id")
		dst = append(dst, 0xc0)
		dst = e.key(dst, m, "medium")
		dst = msgpack.AppendOptStr(dst, ev.Medium)
		dst = e.key(dst, m, "lora_name")
		dst = msgpack.AppendOptStr(dst, ev.LoraName)
		dst = e.key(dst, m, "extra_keys")
		dst = msgpack.AppendArrayHeader(dst, len(ev.BlockHashes))
		for range ev.BlockHashes {
			dst = append(dst, 0xc0)
		}
		dst = e.key(dst, m, "group_idx")
		dst = msgpack.AppendUint(dst, uint64(ev.GroupIdx))
		if ev.SpecKind != "" {
			dst = e.key(dst, m, "kv_cache_spec_kind")
			dst = msgpack.AppendStr(dst, ev.SpecKind)
		} else if !m {
			dst = append(dst, 0xc0)
		}
		if !m {
			dst = append(dst, 0xc0) // kv_cache_spec_sliding_window
		}
	case radix.Removed:
		if m {
			dst = append(dst, 0x84)
			dst = msgpack.AppendStr(dst, "type")
		} else {
			dst = append(dst, 0x94)
		}
		dst = msgpack.AppendStr(dst, "BlockRemoved")
		dst = e.key(dst, m, "block_hashes")
		dst = e.appendHashes(dst, ev.BlockHashes)
		dst = e.key(dst, m, "medium")
		dst = msgpack.AppendOptStr(dst, ev.Medium)
		dst = e.key(dst, m, "group_idx")
		dst = msgpack.AppendUint(dst, uint64(ev.GroupIdx))
	case radix.Cleared:
		if m {
			dst = append(dst, 0x81)
			dst = msgpack.AppendStr(dst, "type")
		} else {
			dst = append(dst, 0x91)
		}
		dst = msgpack.AppendStr(dst, "AllBlocksCleared")
	default:
		panic(fmt.Sprintf("zmqin: AppendBatch with event kind %v", ev.Kind))
	}
	return dst
}

// key writes a map key in map form and nothing in array form.
func (e Encoder) key(dst []byte, m bool, k string) []byte {
	if m {
		return msgpack.AppendStr(dst, k)
	}
	return dst
}

func (e Encoder) appendHashes(dst []byte, hs []uint64) []byte {
	dst = msgpack.AppendArrayHeader(dst, len(hs))
	for _, h := range hs {
		dst = e.appendHash(dst, h)
	}
	return dst
}

func (e Encoder) appendHash(dst []byte, h uint64) []byte {
	switch e.Hashes {
	case HashSigned:
		return msgpack.AppendInt(dst, int64(h))
	case HashBytes:
		dst = append(dst, 0xc4, 32)
		dst = append(dst, make([]byte, 24)...)
		return binary.BigEndian.AppendUint64(dst, h)
	}
	return msgpack.AppendUint(dst, h)
}
