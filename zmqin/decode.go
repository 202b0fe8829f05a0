package zmqin

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// ErrMalformed marks a batch that is not a well-formed msgpack KV event
// batch: truncated, an invalid lead byte, a declared length larger than the
// bytes left, a wrong envelope shape, or trailing bytes. The whole batch is
// rejected; nothing of it may be applied. It is the msgpack reader's error
// (zmqin/internal/msgpack), which the shape errors below wrap too.
var ErrMalformed = msgpack.ErrMalformed

// Shape errors of a batch. They are preallocated so that the decoder
// allocates nothing even on the error path.
var (
	errTrailing  = fmt.Errorf("%w: trailing bytes after the batch", ErrMalformed)
	errEnvelope  = fmt.Errorf("%w: batch is not [ts, events] or [ts, events, dp_rank]", ErrMalformed)
	errTimestamp = fmt.Errorf("%w: timestamp is not a number", ErrMalformed)
	errEvents    = fmt.Errorf("%w: events is not an array", ErrMalformed)
	errRank      = fmt.Errorf("%w: data_parallel_rank is not nil or a u32", ErrMalformed)
	// errBatchTooLarge: the batch would decode into more than
	// MaxDecodedBatchBytes.
	errBatchTooLarge = fmt.Errorf("%w: batch decodes into more than %d MiB", ErrMalformed, MaxDecodedBatchBytes>>20)
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
	// DropUnknownMedium: a medium string that maps to no tier (ParseMedium).
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
	// decoded is what the batch being decoded has spent of
	// MaxDecodedBatchBytes (spend).
	decoded int

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

	// The current event's extra_keys (extra.go): mm hashes, one span per
	// entry, and the first entry's strings (aliasing the payload). Reset
	// by readExtraKeys and after each event.
	mm        []uint64
	mmBlocks  []span
	firstStrs [][]byte
	mmBuf     []byte

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

// MaxDecodedBatchBytes bounds the memory one batch decodes into. Decoded
// data is larger than its msgpack (a one-hash BlockRemoved is 25 bytes on
// the wire and 128 decoded, a block hash 9 and 16, a token id 1 to 5 and
// 4), so without a bound one message of the 64 MiB allowed could make a
// listener allocate gigabytes: a 26 MB message of a million removes
// allocated 950 MB to decode and copy. Each array is counted at its header,
// before any of it is kept (spend); a batch over the bound is rejected as
// malformed. 64 MiB is some 500,000 events, 4 million blocks or 16 million
// token ids: hundreds of times what one engine step publishes (a step
// schedules at most max_num_batched_tokens tokens, typically 8 to 64 Ki).
const MaxDecodedBatchBytes = 64 << 20

// Decoded sizes spend counts: an event with its eventMeta, a block (a
// block hash becomes one), a token id.
const (
	eventCost = int(unsafe.Sizeof(radix.Event{}) + unsafe.Sizeof(eventMeta{}))
	blockCost = int(unsafe.Sizeof(radix.Block{}))
	tokenCost = 4
)

// spend counts n decoded items of cost bytes each against
// MaxDecodedBatchBytes, failing with errBatchTooLarge past it.
func (d *Decoder) spend(n, cost int) error {
	if n > (MaxDecodedBatchBytes-d.decoded)/cost {
		return errBatchTooLarge
	}
	d.decoded += n * cost
	return nil
}

// dropScratch releases the memory reused across batches (it grows to the
// largest batch decoded), keeping what was learned across batches: a
// listener calls it when its connection ends.
func (d *Decoder) dropScratch() {
	d.events, d.meta, d.blocks, d.hashes, d.tokens = nil, nil, nil, nil, nil
	d.mm, d.mmBlocks, d.firstStrs, d.mmBuf = nil, nil, nil, nil
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
	d.decoded = 0
	var b Batch
	r := msgpack.Reader{B: payload}
	err := d.batch(&r, &b)
	if err == nil && r.Off != len(payload) {
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
	if salt := d.cacheSalt(ev); salt != nil {
		seed = radix.HashSeed(string(ev.lora), string(salt))
	}
	bs := d.blockSize
	lo := len(d.blocks)
	for i, h := range d.hashes[ev.hLo:ev.hHi] {
		d.blocks = append(d.blocks, radix.Block{
			Hash:  h,
			Local: radix.BlockHashMM(d.tokens[i*bs:(i+1)*bs], d.blockMM(i), seed, &d.mmBuf),
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
