package zmqin

import (
	"math"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// kindClass classifies a kv_cache_spec_kind string. The zero value means
// no kind was sent.
type kindClass uint8

const (
	kindNone    kindClass = iota
	kindMain              // full_attention, mla_attention, sink_full_attention
	kindOther             // a known kind that is not main attention
	kindUnknown           // a string this package does not know
)

// classifyKind maps vLLM's kv_cache_spec_kind names to a class. Main
// attention is the set Dynamo's normaliser routes on.
func classifyKind(s []byte) kindClass {
	switch string(s) {
	case "":
		return kindNone
	case "full_attention", "mla_attention", "sink_full_attention":
		return kindMain
	case "sliding_window", "sliding_window_mla", "mamba", "chunked_local_attention",
		"encoder_only_attention", "cross_attention":
		return kindOther
	}
	return kindUnknown
}

// maxGroups bounds the learned (rank, group) table. Real engines have a
// handful of groups per rank; a hostile stream cannot grow it further (new
// pairs are then not learned, so their events stay unlearned).
const maxGroups = 1024

// Reset forgets the KV-cache group kinds learned so far. Call it when the
// publisher starts a new incarnation (its seq restarts).
func (d *Decoder) Reset() { clear(d.groups) }

// filterGroup learns from and filters one emitted event once the batch's
// effective rank is known. Rules, in order: a Stored event carrying both
// group_idx and a kind teaches that (rank, group)'s kind; an event with a
// kind is kept iff it is main attention; otherwise an event with a learned
// group is kept iff the group is main attention; an unlearned group other
// than 0 is dropped; an event without group metadata is kept.
func (d *Decoder) filterGroup(rank uint32, kind radix.EventKind, m *eventMeta) (DropReason, bool) {
	if !m.hasGroup && m.kind == kindNone {
		return 0, false
	}
	key := uint64(rank)<<32 | uint64(m.group)
	if kind == radix.Stored && m.hasGroup && m.kind != kindNone {
		// Read before writing: nearly every store repeats what is known.
		if old, ok := d.groups[key]; (ok && old != m.kind) || (!ok && len(d.groups) < maxGroups) {
			if d.groups == nil {
				d.groups = make(map[uint64]kindClass)
			}
			d.groups[key] = m.kind
		}
	}
	k := m.kind
	if k == kindNone {
		learned, ok := d.groups[key]
		switch {
		case ok:
			k = learned
		case m.group == 0:
			return 0, false
		default:
			return DropUnlearnedGroup, true
		}
	}
	switch k {
	case kindMain:
		return 0, false
	case kindOther:
		return DropNonMainAttention, true
	}
	return DropUnknownKind, true
}

// readGroup reads group_idx: nil or a u32.
func (d *Decoder) readGroup(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.hasGroup = false
		return nil
	}
	v, err := r.U32()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.group, ev.hasGroup = v, true
	return nil
}

// readKind reads kv_cache_spec_kind: nil or a string.
func (d *Decoder) readKind(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.kind = kindNone
		return nil
	}
	s, err := r.Str()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.kind = classifyKind(s)
	return nil
}

// readTail reads one element of a positional event's metadata tail (from
// index 9 of BlockStored, 3 of BlockRemoved) by its type, as the tail's
// layout has varied: the first u32 is group_idx (a second one, the sliding
// window, is ignored), a string is kv_cache_spec_kind, anything else (nil,
// a block_mm_infos array, later fields) is skipped.
func (d *Decoder) readTail(r *msgpack.Reader, ev *rawEvent) error {
	c, err := r.Peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || (c >= 0xcc && c <= 0xcf) || (c >= 0xd0 && c <= 0xd3) || c >= 0xe0:
		if ev.hasGroup {
			return r.Skip()
		}
		v, neg, err := r.Integer()
		if err != nil || neg || v > math.MaxUint32 {
			return err // an out-of-range integer is consumed and ignored
		}
		ev.group, ev.hasGroup = uint32(v), true
		return nil
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		s, err := r.Str()
		if err != nil {
			return err
		}
		ev.kind = classifyKind(s)
		return nil
	}
	return r.Skip()
}
