package zmqin

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// Readers of one event field each, shared by the array and map event
// shapes: they read the msgpack value (zmqin/internal/msgpack), check it, and record it
// in the rawEvent. A value of the wrong type or out of range marks the
// event unusable (it is dropped, counted) without failing the batch; only
// structural msgpack errors fail the batch.

// soft turns a field reader's error into (unusable value, structural error):
// msgpack.ErrType means nothing was consumed, so the value is skipped here.
func soft(r *msgpack.Reader, err error) (bad bool, hard error) {
	switch err {
	case nil:
		return false, nil
	case msgpack.ErrType:
		return true, r.Skip()
	case errBad:
		return true, nil
	}
	return true, err
}

// errBad reports a value that was consumed but is unusable (e.g. an empty
// EAGLE token pair). Like msgpack.ErrType it is not structural.
var errBad = errors.New("zmqin: unusable value")

// readHashes reads block_hashes (nil or an array of hashes) into d.hashes.
func (d *Decoder) readHashes(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		return nil
	}
	n, err := r.ArrayLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	if err := d.spend(n, blockCost); err != nil {
		return err
	}
	ev.hLo = len(d.hashes)
	for ; n > 0; n-- {
		h, err := readHash(r)
		if bad, hard := soft(r, err); hard != nil {
			return hard
		} else if bad {
			ev.bad = true
			continue
		}
		d.hashes = append(d.hashes, h)
	}
	ev.hHi = len(d.hashes)
	ev.hasHashes = true
	return nil
}

// readHash consumes a block hash and normalises it to a u64 key: an integer
// of either family by its two's-complement bits (SGLang and vLLM before
// v0.10.2 send signed hashes); a bin as its last 8 bytes big-endian (a
// shorter bin is read as a big-endian integer of its length), which is
// the key vLLM sends in its default int mode for the same digest
// (maybe_convert_block_hash, vllm-project/vllm:vllm/v1/core/kv_cache_utils.py).
func readHash(r *msgpack.Reader) (uint64, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	if c == 0xcf { // the common case from vLLM: u64 >= 2^32
		if r.Left() < 9 {
			return 0, msgpack.ErrTruncated
		}
		v := binary.BigEndian.Uint64(r.B[r.Off+1:])
		r.Off += 9
		return v, nil
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		p, err := r.Bin()
		if err != nil {
			return 0, err
		}
		if len(p) > 8 {
			p = p[len(p)-8:]
		}
		var v uint64
		for _, x := range p {
			v = v<<8 | uint64(x)
		}
		return v, nil
	}
	v, _, err := r.Integer()
	return v, err
}

func (d *Decoder) readParent(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.hasParent = false
		return nil
	}
	h, err := readHash(r)
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.parent, ev.hasParent = h, true
	return nil
}

// readTokens reads token_ids (nil or an array of u32) into d.tokens. An
// element that is itself an array is an EAGLE bigram [t_i, t_i+1] (SGLang);
// its first id is the token at that position.
func (d *Decoder) readTokens(r *msgpack.Reader, ev *rawEvent) error {
	d.tokens = d.tokens[:0]
	if r.IsNil() {
		return nil
	}
	n, err := r.ArrayLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	if err := d.spend(n, tokenCost); err != nil {
		return err
	}
	// Fast path for the three encodings msgspec uses for token ids below
	// 2^32 (fixint, cd, ce): one 8-byte load and a table lookup per id, the
	// offset kept in a register, stores into a slice sized once. The token
	// loop is the largest cost of a BlockStored (36-44% of BenchmarkDecode);
	// a switch on the lead byte branches on data (ids above 65535 are
	// common, so cd and ce mix). On the shared 2-core machine the versions
	// measured within noise of each other (1.0-1.9 M events/s); re-measure
	// on a quiet machine before building on this.
	//
	// Sizing by n is bounded: arrayLen guarantees n <= bytes left.
	toks := slices.Grow(d.tokens[:0], n)[:n]
	b := r.B
	off := r.Off
	for i := 0; i < n; {
		for ; i < n && off+8 <= len(b); i++ {
			f := tokenFormats[b[off]]
			if f.width == 0 {
				break
			}
			v := binary.BigEndian.Uint64(b[off:])
			toks[i] = uint32(v>>f.shift) & f.mask
			off += int(f.width)
		}
		if i == n {
			break
		}
		r.Off = off
		t, err := readToken(r)
		bad, hard := soft(r, err)
		if hard != nil {
			d.tokens = toks[:0]
			return hard
		}
		// An unusable id leaves 0 in its slot; the event is dropped.
		ev.bad = ev.bad || bad
		toks[i] = t
		i++
		off = r.Off
	}
	r.Off = off
	d.tokens = toks
	return nil
}

// tokenFormat describes how a lead byte encodes a token id inside the
// big-endian 8-byte word starting at the lead byte: the id is
// (word >> shift) & mask and takes width bytes. width 0: not a fast-path
// encoding.
type tokenFormat struct {
	shift uint8
	width uint8
	mask  uint32
}

var tokenFormats = func() (t [256]tokenFormat) {
	for c := 0; c <= 0x7f; c++ {
		t[c] = tokenFormat{shift: 56, width: 1, mask: 0x7f}
	}
	t[0xcd] = tokenFormat{shift: 40, width: 3, mask: 0xffff}
	t[0xce] = tokenFormat{shift: 24, width: 5, mask: 0xffffffff}
	return t
}()

// readToken reads one token id: a u32, or an EAGLE pair whose first element
// is a u32. msgpack.ErrType: nothing consumed; errBad: consumed but unusable.
func readToken(r *msgpack.Reader) (uint32, error) {
	t, err := r.U32()
	if err != msgpack.ErrType {
		return t, err
	}
	m, err := r.ArrayLen()
	if err != nil {
		return 0, err
	}
	if m == 0 {
		return 0, errBad
	}
	t, err = r.U32()
	if err == msgpack.ErrType {
		err = r.Skip()
		if err == nil {
			err = errBad
		}
	}
	if err2 := r.SkipN(m - 1); err2 != nil {
		return 0, err2
	}
	return t, err
}

func (d *Decoder) readBlockSize(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.hasBlockSize = false
		return nil
	}
	v, neg, err := r.Integer()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	if neg || v > math.MaxInt32 {
		ev.bad = true
		return nil
	}
	ev.blockSize, ev.hasBlockSize = int64(v), true
	return nil
}

// readMedium maps medium to a tier: nil or "" is the device tier; an
// unknown string marks the event for DropUnknownMedium.
func (d *Decoder) readMedium(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.tier, ev.badMedium = radix.TierDevice, false
		return nil
	}
	s, err := r.Str()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	t, ok := ParseMedium(s)
	ev.tier, ev.badMedium = t, !ok
	return nil
}

// readLocality reads locality: nil or "LOCAL" keep the event, any other
// string (REMOTE, or unknown) drops it.
func (d *Decoder) readLocality(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.nonLocal = false
		return nil
	}
	s, err := r.Str()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.nonLocal = string(s) != "LOCAL"
	return nil
}

// readLora reads lora_name: nil, a string, or (SGLang salted stores, which
// put a metadata map in this slot) a map whose "lora_name" entry is used.
func (d *Decoder) readLora(r *msgpack.Reader, ev *rawEvent) error {
	if r.IsNil() {
		ev.lora = nil
		return nil
	}
	s, err := r.Str()
	if err == nil {
		ev.lora = s
		return nil
	}
	if err != msgpack.ErrType {
		return err
	}
	n, err := r.MapLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.lora = nil
	for ; n > 0; n-- {
		key, err := r.Str()
		if err == nil && string(key) == "lora_name" {
			if r.IsNil() {
				continue
			}
			s, err := r.Str()
			if bad, hard := soft(r, err); hard != nil {
				return hard
			} else if bad {
				ev.bad = true
			} else {
				ev.lora = s
			}
			continue
		}
		if err == msgpack.ErrType {
			err = r.Skip()
		}
		if err == nil {
			err = r.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ParseMedium maps a medium string to a storage tier, as Dynamo's
// converter does (ai-dynamo/dynamo:lib/kv-router/src/zmq_wire/convert.rs),
// ASCII case-insensitive: "" (and nil on the wire) → device;
// GPU, DEVICE → device; CPU, CPU_PINNED, CPU_TIER1 → host_pinned; CPU_TIER2,
// DISK, NVME, STORAGE → disk; EXTERNAL, NETWORK, REMOTE, SHARED → external.
// Anything else reports false.
func ParseMedium(s []byte) (radix.Tier, bool) {
	if len(s) == 0 {
		return radix.TierDevice, true
	}
	var up [16]byte
	if len(s) > len(up) {
		return 0, false
	}
	for i, c := range s {
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	switch string(up[:len(s)]) {
	case "GPU", "DEVICE":
		return radix.TierDevice, true
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return radix.TierHostPinned, true
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return radix.TierDisk, true
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return radix.TierExternal, true
	}
	return 0, false
}
