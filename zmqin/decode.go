package zmqin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvselect/kvselect/radix"
)

// DropReason says why one event of an otherwise well-formed batch was
// skipped. The rest of the batch is still decoded.
type DropReason uint8

const (
	// DropMalformed: the event is well-formed msgpack but not a usable event:
	// neither an array nor a map, no tag, a field of the wrong type (a string
	// hash, a negative token id), or a missing block_hashes.
	DropMalformed DropReason = iota
	// DropUnknownTag: a tag other than BlockStored, BlockRemoved and
	// AllBlocksCleared (e.g. the proposed BlockInactive).
	DropUnknownTag
	// DropUnknownMedium: a medium string that maps to no tier (spec section 5).
	DropUnknownMedium
	// DropBlockSizeMismatch: a BlockStored whose block_size is not the
	// partition's block size; this includes tokenless offload stores, which
	// carry block_size 0.
	DropBlockSizeMismatch
	// DropTokenCount: a BlockStored whose token count is not
	// len(block_hashes) * block_size, so blocks cannot be cut.
	DropTokenCount
	// DropEmpty: a BlockStored or BlockRemoved with no block hashes (a no-op).
	DropEmpty
	// DropNonMainAttention: an event of a KV-cache group that is not main
	// attention (sliding window, mamba, ...), by its kv_cache_spec_kind or
	// by the kind learned for its group_idx (see Decoder).
	DropNonMainAttention
	// DropUnknownKind: a kv_cache_spec_kind this package does not know,
	// carried or learned for the group; treated as not main attention.
	DropUnknownKind
	// DropUnlearnedGroup: a group_idx other than 0 without a kind, before
	// any BlockStored has taught the group's kind.
	DropUnlearnedGroup
	// DropNonLocal: a map event whose locality is not "LOCAL" (a block held
	// remotely, not in this worker's cache).
	DropNonLocal
	numDropReasons
)

var dropNames = [numDropReasons]string{
	"malformed", "unknown_tag", "unknown_medium", "block_size_mismatch", "token_count", "empty",
	"non_main_attention", "unknown_kind", "unlearned_group", "non_local",
}

// String returns the reason's metric label.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return fmt.Sprintf("drop(%d)", uint8(r))
}

// DropCounts counts skipped events by reason: c[DropUnknownTag] is the number
// of events skipped for an unknown tag.
type DropCounts [numDropReasons]uint64

// Total returns the number of skipped events over all reasons.
func (c *DropCounts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

func (c *DropCounts) add(o *DropCounts) {
	for i, v := range o {
		c[i] += v
	}
}

// Batch is one decoded KV event batch.
//
// Lifetime: Events, and the Blocks and Hashes slices inside them, are owned
// by the Decoder and stay valid only until its next Decode call. A caller
// that keeps them longer (e.g. hands them to another goroutine) must copy.
type Batch struct {
	// Timestamp is the publisher's time.time() of the batch, in seconds.
	Timestamp float64
	// DPRank is the batch's data_parallel_rank when HasDPRank; a nil or
	// absent rank (the [ts, events] era) leaves HasDPRank false. When set it
	// overrides the listener's rank: the decoder has already applied it to
	// every Event.Worker, and a bootstrap-mode caller may use it to drop a
	// batch whose rank differs from the listener's.
	DPRank    uint32
	HasDPRank bool
	// Events are the usable events in emission order, with Worker set to
	// the listener's worker and the effective rank. EventID is left 0: the
	// caller numbers accepted events.
	Events []radix.Event
	// Skipped counts the events of this batch that were dropped, by reason.
	Skipped DropCounts
}

// DecodeStats are a Decoder's cumulative counters since NewDecoder.
type DecodeStats struct {
	Batches   uint64     // batches decoded without error
	Malformed uint64     // batches rejected with ErrMalformed
	Events    uint64     // events returned
	Dropped   DropCounts // events skipped inside decoded batches
}

// eventMeta is what the Decoder keeps beside each emitted event until the
// batch is complete: [lo, hi) locates its Blocks in blocks (Stored) or its
// Hashes in hashes (Removed), and group/kind are its KV-cache group
// metadata, filtered once the batch's rank is known.
type eventMeta struct {
	lo, hi   int
	group    uint32
	hasGroup bool
	kind     kindClass
}

// Decoder turns vLLM/SGLang msgpack KV event batches into radix events for
// one partition block size. It is not safe for concurrent use: a listener
// owns one Decoder per goroutine. Its slices are reused across batches, so
// a warm Decoder allocates nothing per batch (see Batch for the lifetime
// rule this implies).
//
// A Decoder also carries state across batches: the kind of each
// (dp_rank, group_idx) learned from BlockStored events that carry both
// (hybrid models publish one group per attention type; only main-attention
// groups describe the prefix cache, and a sliding-window group's removals
// must not remove full-attention blocks with the same hash). Events of
// other groups are dropped (DropNonMainAttention, DropUnknownKind,
// DropUnlearnedGroup). Call Reset when the publisher restarts.
//
// Representation: during a Decode, events[i] is the i-th usable event and
// meta[i] locates its Blocks in blocks (Stored) or its Hashes in hashes
// (Removed); the slices are attached only once the batch is complete, because
// appends may move the backing arrays. hashes also serves as scratch for the
// current event's block_hashes, and tokens holds the current event's token
// ids. Invariant: len(events) <= len(payload) and len(blocks)+len(hashes) <=
// len(payload), since every event and every hash takes at least one byte.
type Decoder struct {
	blockSize int

	events []radix.Event
	meta   []eventMeta
	blocks []radix.Block
	hashes []uint64
	tokens []uint32

	// loraName and loraSeed cache the last LoRA adapter's hash seed, so
	// that a stream of events for one adapter neither allocates nor rehashes
	// the name.
	loraName string
	loraSeed uint64

	// groups maps rank<<32|group_idx to the kind learned for it. Bounded
	// by maxGroups: keys come from untrusted bytes.
	groups map[uint64]kindClass

	stats DecodeStats
}

// NewDecoder returns a Decoder for a partition whose KV block size is
// blockSize tokens. blockSize must be positive.
func NewDecoder(blockSize int) *Decoder {
	if blockSize <= 0 || blockSize > math.MaxInt32 {
		panic(fmt.Sprintf("zmqin: NewDecoder with block size %d", blockSize))
	}
	return &Decoder{blockSize: blockSize}
}

// dropScratch releases the memory reused across batches (it grows to the
// largest batch decoded), keeping what was learned across batches: a
// listener calls it when its connection ends.
func (d *Decoder) dropScratch() {
	d.events, d.meta, d.blocks, d.hashes, d.tokens = nil, nil, nil, nil, nil
}

// BlockSize returns the partition block size the Decoder cuts blocks by.
func (d *Decoder) BlockSize() int { return d.blockSize }

// Stats returns the cumulative counters. Like Decode, it must not race with
// Decode.
func (d *Decoder) Stats() DecodeStats { return d.stats }

// Decode decodes one batch payload (frame 2 of a live message) published by
// worker's listener. worker.DPRank is the listener's rank; a batch rank
// overrides it (see Batch.DPRank). A payload that is not a well-formed batch
// returns an error wrapping ErrMalformed and an empty Batch: nothing of it
// may be applied. Decode never panics and never retains payload.
func (d *Decoder) Decode(payload []byte, worker radix.WorkerKey) (Batch, error) {
	d.events = d.events[:0]
	d.meta = d.meta[:0]
	d.blocks = d.blocks[:0]
	d.hashes = d.hashes[:0]
	var b Batch
	r := reader{b: payload}
	err := d.batch(&r, &b)
	if err == nil && r.off != len(payload) {
		err = errTrailing
	}
	if err != nil {
		d.stats.Malformed++
		d.events = d.events[:0]
		if !errors.Is(err, ErrMalformed) { // a stray soft error: never leak it
			err = errEnvelope
		}
		return Batch{}, err
	}
	rank := worker.DPRank
	if b.HasDPRank {
		rank = b.DPRank
	}
	key := radix.WorkerKey{WorkerID: worker.WorkerID, DPRank: rank}
	kept := 0
	for i := range d.events {
		m := &d.meta[i]
		if reason, drop := d.filterGroup(rank, d.events[i].Kind, m); drop {
			b.Skipped[reason]++
			continue
		}
		e := d.events[i]
		e.Worker = key
		switch e.Kind {
		case radix.Stored:
			e.Blocks = d.blocks[m.lo:m.hi:m.hi]
		case radix.Removed:
			e.Hashes = d.hashes[m.lo:m.hi:m.hi]
		}
		d.events[kept] = e
		kept++
	}
	d.events = d.events[:kept]
	b.Events = d.events
	d.stats.Batches++
	d.stats.Events += uint64(len(d.events))
	d.stats.Dropped.add(&b.Skipped)
	return b, nil
}

// batch decodes the envelope: [ts, events] or [ts, events, dp_rank] (extra
// elements ignored), or defensively a map with keys ts, events and
// data_parallel_rank (or SGLang's attn_dp_rank).
func (d *Decoder) batch(r *reader, b *Batch) error {
	if c, err := r.peek(); err != nil {
		return err
	} else if (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf {
		return d.mapBatch(r, b)
	}
	n, err := r.arrayLen()
	if err != nil {
		if err == errType {
			return errEnvelope
		}
		return err
	}
	if n < 2 {
		return errEnvelope
	}
	if b.Timestamp, err = r.float(); err != nil {
		if err == errType {
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
	return r.skipN(n - 3)
}

func (d *Decoder) mapBatch(r *reader, b *Batch) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	sawEvents := false
	for ; n > 0; n-- {
		key, err := r.str()
		if err == errType {
			err = r.skip()
			key = nil
		}
		if err != nil {
			return err
		}
		switch string(key) {
		case "ts":
			if b.Timestamp, err = r.float(); err == errType {
				return errTimestamp
			}
		case "events":
			sawEvents = true
			err = d.eventList(r, b)
		case "data_parallel_rank", "attn_dp_rank":
			err = d.rank(r, b)
		default:
			err = r.skip()
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
func (d *Decoder) rank(r *reader, b *Batch) error {
	if r.isNil() {
		b.HasDPRank = false
		return nil
	}
	v, neg, err := r.integer()
	if err == errType || (err == nil && (neg || v > math.MaxUint32)) {
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
func (d *Decoder) eventList(r *reader, b *Batch) error {
	m, err := r.arrayLen()
	if err != nil {
		if err == errType {
			return errEvents
		}
		return err
	}
	for ; m > 0; m-- {
		c, err := r.peek()
		if err != nil {
			return err
		}
		h0 := len(d.hashes)
		d.tokens = d.tokens[:0]
		ev := rawEvent{}
		switch {
		case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
			n, err := r.arrayLen()
			if err != nil {
				return err
			}
			if err := d.arrayEvent(r, n, &ev); err != nil {
				return err
			}
		case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
			n, err := r.mapLen()
			if err != nil {
				return err
			}
			if err := d.mapEvent(r, n, &ev); err != nil {
				return err
			}
		default:
			if err := r.skip(); err != nil {
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
	group        uint32
	hasGroup     bool
	kind         kindClass
	nonLocal     bool
	bad          bool
}

// soft turns a field reader's error into (unusable value, structural error):
// errType means nothing was consumed, so the value is skipped here.
func soft(r *reader, err error) (bad bool, hard error) {
	switch err {
	case nil:
		return false, nil
	case errType:
		return true, r.skip()
	case errBad:
		return true, nil
	}
	return true, err
}

// errBad reports a value that was consumed but is unusable (e.g. an empty
// EAGLE token pair). Like errType it is not structural.
var errBad = errors.New("zmqin: unusable value")

// arrayEvent decodes a msgspec array_like event of n elements (tag first).
// Fields are positional (spec section 2.4); a short array leaves trailing
// fields nil, extra elements are skipped.
func (d *Decoder) arrayEvent(r *reader, n int, ev *rawEvent) error {
	if n == 0 {
		ev.bad = true
		return nil
	}
	tag, err := r.str()
	if bad, hard := soft(r, err); hard != nil {
		return hard
	} else if bad {
		ev.bad = true
		return r.skipN(n - 1)
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
			case 5, 8: // lora_id (deprecated), extra_keys
				err = r.skip()
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
			return r.skipN(n - i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mapEvent decodes a msgspec tagged-map event of n pairs, by key, in any
// order; unknown keys (and non-string keys) are skipped.
func (d *Decoder) mapEvent(r *reader, n int, ev *rawEvent) error {
	for ; n > 0; n-- {
		key, err := r.str()
		if err == errType {
			if err := r.skip(); err != nil {
				return err
			}
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		switch string(key) {
		case "type":
			tag, err := r.str()
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
		case "group_idx":
			err = d.readGroup(r, ev)
		case "kv_cache_spec_kind":
			err = d.readKind(r, ev)
		case "locality":
			err = d.readLocality(r, ev)
		default:
			err = r.skip()
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

// readHashes reads block_hashes (nil or an array of hashes) into d.hashes.
func (d *Decoder) readHashes(r *reader, ev *rawEvent) error {
	if r.isNil() {
		return nil
	}
	n, err := r.arrayLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.hLo = len(d.hashes)
	for ; n > 0; n-- {
		h, err := r.hash()
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

func (d *Decoder) readParent(r *reader, ev *rawEvent) error {
	if r.isNil() {
		ev.hasParent = false
		return nil
	}
	h, err := r.hash()
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
func (d *Decoder) readTokens(r *reader, ev *rawEvent) error {
	d.tokens = d.tokens[:0]
	if r.isNil() {
		return nil
	}
	n, err := r.arrayLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
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
	b := r.b
	off := r.off
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
		r.off = off
		t, err := r.token()
		bad, hard := soft(r, err)
		if hard != nil {
			d.tokens = toks[:0]
			return hard
		}
		// An unusable id leaves 0 in its slot; the event is dropped.
		ev.bad = ev.bad || bad
		toks[i] = t
		i++
		off = r.off
	}
	r.off = off
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

// token reads one token id: a u32, or an EAGLE pair whose first element is
// a u32. errType: nothing consumed; errBad: consumed but unusable.
func (r *reader) token() (uint32, error) {
	t, err := r.u32()
	if err != errType {
		return t, err
	}
	m, err := r.arrayLen()
	if err != nil {
		return 0, err
	}
	if m == 0 {
		return 0, errBad
	}
	t, err = r.u32()
	if err == errType {
		err = r.skip()
		if err == nil {
			err = errBad
		}
	}
	if err2 := r.skipN(m - 1); err2 != nil {
		return 0, err2
	}
	return t, err
}

func (d *Decoder) readBlockSize(r *reader, ev *rawEvent) error {
	if r.isNil() {
		ev.hasBlockSize = false
		return nil
	}
	v, neg, err := r.integer()
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
func (d *Decoder) readMedium(r *reader, ev *rawEvent) error {
	if r.isNil() {
		ev.tier, ev.badMedium = radix.TierDevice, false
		return nil
	}
	s, err := r.str()
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
func (d *Decoder) readLocality(r *reader, ev *rawEvent) error {
	if r.isNil() {
		ev.nonLocal = false
		return nil
	}
	s, err := r.str()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.nonLocal = string(s) != "LOCAL"
	return nil
}

// readLora reads lora_name: nil, a string, or (SGLang salted stores, which
// put a metadata map in this slot) a map whose "lora_name" entry is used.
func (d *Decoder) readLora(r *reader, ev *rawEvent) error {
	if r.isNil() {
		ev.lora = nil
		return nil
	}
	s, err := r.str()
	if err == nil {
		ev.lora = s
		return nil
	}
	if err != errType {
		return err
	}
	n, err := r.mapLen()
	if bad, hard := soft(r, err); hard != nil || bad {
		ev.bad = ev.bad || bad
		return hard
	}
	ev.lora = nil
	for ; n > 0; n-- {
		key, err := r.str()
		if err == nil && string(key) == "lora_name" {
			if r.isNil() {
				continue
			}
			s, err := r.str()
			if bad, hard := soft(r, err); hard != nil {
				return hard
			} else if bad {
				ev.bad = true
			} else {
				ev.lora = s
			}
			continue
		}
		if err == errType {
			err = r.skip()
		}
		if err == nil {
			err = r.skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ParseMedium maps a medium string to a storage tier (spec section 5,
// conversion; ASCII case-insensitive): "" (and nil on the wire) → device;
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

// finish validates the collected event and either appends it to d.events or
// counts it in b.Skipped. d.hashes is cut back to h0 (its length before the
// event) unless the event is a Removed that keeps its hashes there.
func (d *Decoder) finish(ev *rawEvent, h0 int, b *Batch) {
	reason := DropReason(numDropReasons)
	switch {
	case ev.bad || ev.tag == tagNone:
		reason = DropMalformed
	case ev.tag == tagUnknown:
		reason = DropUnknownTag
	case ev.tag != tagCleared && !ev.hasHashes:
		reason = DropMalformed
	case ev.badMedium:
		reason = DropUnknownMedium
	case ev.nonLocal:
		reason = DropNonLocal
	}
	if reason == numDropReasons {
		switch ev.tag {
		case tagCleared:
			d.hashes = d.hashes[:h0]
			d.emit(radix.Event{Kind: radix.Cleared}, eventMeta{})
			return
		case tagRemoved:
			if ev.hHi == ev.hLo {
				reason = DropEmpty
				break
			}
			d.emit(radix.Event{Kind: radix.Removed, Tier: ev.tier},
				eventMeta{lo: ev.hLo, hi: ev.hHi, group: ev.group, hasGroup: ev.hasGroup, kind: ev.kind})
			return
		case tagStored:
			nh := ev.hHi - ev.hLo
			switch {
			case !ev.hasBlockSize || ev.blockSize != int64(d.blockSize):
				reason = DropBlockSizeMismatch
			case int64(len(d.tokens)) != int64(nh)*ev.blockSize:
				reason = DropTokenCount
			case nh == 0:
				reason = DropEmpty
			default:
				d.stored(ev, h0)
				return
			}
		}
	}
	d.hashes = d.hashes[:h0]
	b.Skipped[reason]++
}

// stored cuts d.tokens into blocks of d.blockSize, pairs each with its
// external hash and local hash, and emits the Stored event. Precondition:
// len(d.tokens) == (ev.hHi-ev.hLo) * d.blockSize.
func (d *Decoder) stored(ev *rawEvent, h0 int) {
	seed := d.seed(ev.lora)
	bs := d.blockSize
	lo := len(d.blocks)
	for i, h := range d.hashes[ev.hLo:ev.hHi] {
		d.blocks = append(d.blocks, radix.Block{
			Hash:  h,
			Local: radix.BlockHash(d.tokens[i*bs:(i+1)*bs], seed),
		})
	}
	d.hashes = d.hashes[:h0]
	d.emit(radix.Event{
		Kind:       radix.Stored,
		Tier:       ev.tier,
		ParentHash: ev.parent,
		HasParent:  ev.hasParent,
	}, eventMeta{lo: lo, hi: len(d.blocks), group: ev.group, hasGroup: ev.hasGroup, kind: ev.kind})
}

func (d *Decoder) emit(e radix.Event, m eventMeta) {
	d.events = append(d.events, e)
	d.meta = append(d.meta, m)
}

// seed returns the local-hash seed for a LoRA name (empty: no LoRA), from
// the one-entry cache when the name repeats.
func (d *Decoder) seed(lora []byte) uint64 {
	if len(lora) == 0 {
		return radix.Seed
	}
	if string(lora) != d.loraName {
		d.loraName = string(lora)
		d.loraSeed = radix.HashSeed(d.loraName, "")
	}
	return d.loraSeed
}
