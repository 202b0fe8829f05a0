package zmqin

import (
	"bytes"
	"unsafe"

	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// extra_keys and cache_salt: what a BlockStored says beyond its tokens
// that changes the blocks' local hashes, read as Dynamo reads them
// (ai-dynamo/dynamo:lib/kv-router/src/zmq_wire/extra_keys.rs and
// deserialize.rs):
//
//   - extra_keys is nil or a list aligned with the event's blocks, each
//     entry nil or a list of items: a string, a [string, offset] pair
//     (vLLM 0.19+), bytes, a number or a boolean. A string of 64 hex
//     digits is a multimodal identifier; its first 16 digits, as a u64,
//     are the mm hash mixed into that block's local hash, exactly as a
//     request's block_mm_infos mm_hash is (radix.BlockHashMM). Every other
//     item (LoRA names, prompt-embedding bytes, ...) is ignored.
//   - The cache salt (the request's cache_salt, which seeds the local
//     hashes with the LoRA name) is the event's cache_salt field when
//     present, else the first "dynamo-cache-salt:<salt>" string of the
//     first block's extra_keys, skipping the first item equal to the LoRA
//     name (Dynamo tags the salt it hands vLLM so that it cannot be
//     mistaken for a LoRA name or an mm hash).
//
// An extra_keys of another shape (not a list of lists) is skipped, as
// before kvselect read it: it carries no mm hash, and the event's tokens
// still index (Dynamo would fail the event's deserialization).

// dynamoCacheSaltPrefix must match Dynamo's _DYNAMO_CACHE_SALT_PREFIX
// (components/src/dynamo/vllm/handlers.py).
const dynamoCacheSaltPrefix = "dynamo-cache-salt:"

// span is a block's mm hashes, d.mm[lo:hi].
type span struct{ lo, hi int32 }

// readExtraKeys reads extra_keys into d.mm, d.mmBlocks (one span per
// entry) and d.firstStrs (the strings of the first entry, aliasing the
// payload, for the cache salt).
func (d *Decoder) readExtraKeys(r *msgpack.Reader) error {
	d.mm, d.mmBlocks, d.firstStrs = d.mm[:0], d.mmBlocks[:0], d.firstStrs[:0]
	if r.IsNil() {
		return nil
	}
	n, err := r.ArrayLen()
	if _, hard := soft(r, err); hard != nil || err != nil {
		return hard
	}
	if err := d.spend(n, int(unsafe.Sizeof(span{}))); err != nil {
		return err
	}
	for b := 0; b < n; b++ {
		lo := int32(len(d.mm))
		if r.IsNil() {
			d.mmBlocks = append(d.mmBlocks, span{lo, lo})
			continue
		}
		m, err := r.ArrayLen()
		if _, hard := soft(r, err); hard != nil {
			return hard
		} else if err != nil {
			d.mmBlocks = append(d.mmBlocks, span{lo, lo})
			continue
		}
		if b == 0 { // firstStrs may keep each item
			if err := d.spend(m, int(unsafe.Sizeof(d.firstStrs[0]))); err != nil {
				return err
			}
		}
		for ; m > 0; m-- {
			if err := d.readExtraItem(r, b == 0); err != nil {
				return err
			}
		}
		d.mmBlocks = append(d.mmBlocks, span{lo, int32(len(d.mm))})
	}
	return nil
}

// readExtraItem reads one item: a string (or the string of a [string,
// offset] pair) that is an mm identifier goes to d.mm; the first entry's
// strings also to d.firstStrs. Anything else is skipped.
func (d *Decoder) readExtraItem(r *msgpack.Reader, first bool) error {
	c, err := r.Peek()
	if err != nil {
		return err
	}
	switch {
	case c == 0xd9 || c == 0xda || c == 0xdb || c&0xe0 == 0xa0: // str
		s, err := r.Str()
		if err != nil {
			return err
		}
		d.extraString(s, first)
		return nil
	case c == 0xdc || c == 0xdd || c&0xf0 == 0x90: // array: [hash, offset]
		k, err := r.ArrayLen()
		if err != nil {
			return err
		}
		if k == 2 {
			if s, err := r.Str(); err == nil {
				d.extraString(s, first)
				return r.Skip()
			} else if err != msgpack.ErrType {
				return err
			}
		}
		return r.SkipN(k)
	}
	return r.Skip()
}

func (d *Decoder) extraString(s []byte, first bool) {
	if h, ok := parseMMHash(s); ok {
		d.mm = append(d.mm, h)
	}
	if first {
		d.firstStrs = append(d.firstStrs, s)
	}
}

// parseMMHash reads a canonical vLLM mm identifier (a 64-digit hex digest)
// as its first 16 digits.
func parseMMHash(s []byte) (uint64, bool) {
	if len(s) != 64 {
		return 0, false
	}
	var h uint64
	for i, c := range s {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		if i < 16 {
			h = h<<4 | uint64(v)
		}
	}
	return h, true
}

// readSalt reads the event's cache_salt field (nil or a string).
func (d *Decoder) readSalt(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.salt, ev.hasSalt = nil, false
		return nil
	}
	s, err := r.Str()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.salt, ev.hasSalt = s, true
	return nil
}

// cacheSalt returns the event's cache salt: its cache_salt field, else the
// tagged string of the first extra_keys entry (see above).
func (d *Decoder) cacheSalt(ev *rawEvent) []byte {
	if ev.hasSalt {
		return ev.salt
	}
	lora := ev.lora
	for _, s := range d.firstStrs {
		if len(lora) > 0 && bytes.Equal(s, lora) {
			lora = nil // the first item equal to the LoRA name is the LoRA
			continue
		}
		if salt, ok := bytes.CutPrefix(s, []byte(dynamoCacheSaltPrefix)); ok && len(salt) > 0 {
			return salt
		}
	}
	return nil
}

// blockMM returns block i's mm hashes (nil when none).
func (d *Decoder) blockMM(i int) []uint64 {
	if i >= len(d.mmBlocks) {
		return nil
	}
	sp := d.mmBlocks[i]
	return d.mm[sp.lo:sp.hi]
}
