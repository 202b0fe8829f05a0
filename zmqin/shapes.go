package zmqin

import (
	"math"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// The shapes of a batch and of its events: the envelope ([ts, events] or
// [ts, events, dp_rank], or a map), the events list, and each event as a
// msgspec tagged array (fields by position) or tagged map (fields by key).
// The fields themselves are read by fields.go.

// batch decodes the envelope: [ts, events] or [ts, events, dp_rank] (extra
// elements ignored), or defensively a map with keys ts, events and
// data_parallel_rank (or SGLang's attn_dp_rank).
func (d *Decoder) batch(r *msgpack.Reader, b *Batch) error {
	if c, err := r.Peek(); err != nil {
		return err
	} else if (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf {
		return d.mapBatch(r, b)
	}
	n, err := r.ArrayLen()
	if err != nil {
		if err == msgpack.ErrType {
			return errEnvelope
		}
		return err
	}
	if n < 2 {
		return errEnvelope
	}
	if b.Timestamp, err = r.Float(); err != nil {
		if err == msgpack.ErrType {
			return errTimestamp
		}
		return err
	}
	if err := d.eventList(r, b); err != nil {
		return err
	}
	if n >= 3 {
		if err := d.rank(r, b); err != nil {
			return err
		}
	}
	return r.SkipN(n - 3)
}

func (d *Decoder) mapBatch(r *msgpack.Reader, b *Batch) error {
	n, err := r.MapLen()
	if err != nil {
		return err
	}
	sawEvents := false
	for ; n > 0; n-- {
		key, err := r.Str()
		if err == msgpack.ErrType {
			err = r.Skip()
			key = nil
		}
		if err != nil {
			return err
		}
		switch string(key) {
		case "ts":
			if b.Timestamp, err = r.Float(); err == msgpack.ErrType {
				return errTimestamp
			}
		case "events":
			sawEvents = true
			err = d.eventList(r, b)
		case "data_parallel_rank", "attn_dp_rank":
			err = d.rank(r, b)
		default:
			err = r.Skip()
		}
		if err != nil {
			return err
		}
	}
	if !sawEvents {
		return errEvents
	}
	return nil
}

// rank decodes data_parallel_rank: nil, or an integer in [0, MaxUint32].
func (d *Decoder) rank(r *msgpack.Reader, b *Batch) error {
	if r.IsNil() {
		b.HasDPRank = false
		return nil
	}
	v, neg, err := r.Integer()
	if err == msgpack.ErrType || (err == nil && (neg || v > math.MaxUint32)) {
		return errRank
	}
	if err != nil {
		return err
	}
	b.DPRank, b.HasDPRank = uint32(v), true
	return nil
}

// eventList decodes the events array. A structural error anywhere fails
// the batch; an unusable event is counted in b.Skipped and skipped.
func (d *Decoder) eventList(r *msgpack.Reader, b *Batch) error {
	m, err := r.ArrayLen()
	if err != nil {
		if err == msgpack.ErrType {
			return errEvents
		}
		return err
	}
	if err := d.spend(m, eventCost); err != nil {
		return err
	}
	for ; m > 0; m-- {
		c, err := r.Peek()
		if err != nil {
			return err
		}
		h0 := len(d.hashes)
		d.tokens = d.tokens[:0]
		d.mm, d.mmBlocks, d.firstStrs = d.mm[:0], d.mmBlocks[:0], d.firstStrs[:0]
		ev := rawEvent{}
		switch {
		case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
			n, err := r.ArrayLen()
			if err != nil {
				return err
			}
			if err := d.arrayEvent(r, n, &ev); err != nil {
				return err
			}
		case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
			n, err := r.MapLen()
			if err != nil {
				return err
			}
			if err := d.mapEvent(r, n, &ev); err != nil {
				return err
			}
		default:
			if err := r.Skip(); err != nil {
				return err
			}
			ev.bad = true
		}
		d.finish(&ev, h0, b)
	}
	return nil
}

// eventTag is an event's class, from its msgspec tag.
type eventTag uint8

const (
	tagNone eventTag = iota // no tag seen (yet)
	tagUnknown
	tagStored
	tagRemoved
	tagCleared
)

func parseTag(s []byte) eventTag {
	switch string(s) {
	case "BlockStored":
		return tagStored
	case "BlockRemoved":
		return tagRemoved
	case "AllBlocksCleared":
		return tagCleared
	}
	return tagUnknown
}

// rawEvent collects one event's fields while it is read, whatever the
// encoding and the key order, before finish validates and emits it.
// block_hashes are in d.hashes[hLo:hHi] and token ids in d.tokens.
type rawEvent struct {
	tag          eventTag
	hLo, hHi     int
	hasHashes    bool
	parent       uint64
	hasParent    bool
	blockSize    int64
	hasBlockSize bool
	tier         radix.Tier
	badMedium    bool
	lora         []byte // aliases the payload
	salt         []byte // cache_salt, aliasing the payload; hasSalt: present
	hasSalt      bool
	group        uint32
	hasGroup     bool
	kind         kindClass
	nonLocal     bool
	bad          bool
}

// arrayEvent decodes a msgspec array_like event of n elements (tag first).
// Fields are positional, in the declaration order of vLLM's BlockStored
// and BlockRemoved (vllm-project/vllm:vllm/distributed/kv_events.py); a
// short array leaves trailing fields nil, extra elements are skipped.
func (d *Decoder) arrayEvent(r *msgpack.Reader, n int, ev *rawEvent) error {
	if n == 0 {
		ev.bad = true
		return nil
	}
	tag, err := r.Str()
	if bad, hard := soft(r, err); hard != nil {
		return hard
	} else if bad {
		ev.bad = true
		return r.SkipN(n - 1)
	}
	ev.tag = parseTag(tag)
	for i := 1; i < n; i++ {
		var err error
		switch ev.tag {
		case tagStored:
			// [tag, block_hashes, parent_block_hash, token_ids, block_size,
			//  lora_id, medium, lora_name, extra_keys, group_idx,
			//  kv_cache_spec_kind, kv_cache_spec_sliding_window, ...]
			switch i {
			case 1:
				err = d.readHashes(r, ev)
			case 2:
				err = d.readParent(r, ev)
			case 3:
				err = d.readTokens(r, ev)
			case 4:
				err = d.readBlockSize(r, ev)
			case 6:
				err = d.readMedium(r, ev)
			case 7:
				err = d.readLora(r, ev)
			case 8:
				err = d.readExtraKeys(r)
			case 5: // lora_id (deprecated)
				err = r.Skip()
			default:
				err = d.readTail(r, ev)
			}
		case tagRemoved:
			// [tag, block_hashes, medium, group_idx, ...]
			switch i {
			case 1:
				err = d.readHashes(r, ev)
			case 2:
				err = d.readMedium(r, ev)
			default:
				err = d.readTail(r, ev)
			}
		default:
			return r.SkipN(n - i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mapEvent decodes a msgspec tagged-map event of n pairs, by key, in any
// order; unknown keys (and non-string keys) are skipped.
func (d *Decoder) mapEvent(r *msgpack.Reader, n int, ev *rawEvent) error {
	for ; n > 0; n-- {
		key, err := r.Str()
		if err == msgpack.ErrType {
			if err := r.Skip(); err != nil {
				return err
			}
			if err := r.Skip(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		switch string(key) {
		case "type":
			tag, err := r.Str()
			bad, hard := soft(r, err)
			if hard != nil {
				return hard
			}
			if bad {
				ev.bad = true
			} else {
				ev.tag = parseTag(tag)
			}
		case "block_hashes":
			err = d.readHashes(r, ev)
		case "parent_block_hash":
			err = d.readParent(r, ev)
		case "token_ids":
			err = d.readTokens(r, ev)
		case "block_size":
			err = d.readBlockSize(r, ev)
		case "medium":
			err = d.readMedium(r, ev)
		case "lora_name":
			err = d.readLora(r, ev)
		case "extra_keys":
			err = d.readExtraKeys(r)
		case "cache_salt":
			err = d.readSalt(r, ev)
		case "group_idx":
			err = d.readGroup(r, ev)
		case "kv_cache_spec_kind":
			err = d.readKind(r, ev)
		case "locality":
			err = d.readLocality(r, ev)
		default:
			err = r.Skip()
		}
		if err != nil {
			return err
		}
	}
	if ev.tag == tagNone {
		ev.bad = true
	}
	return nil
}
