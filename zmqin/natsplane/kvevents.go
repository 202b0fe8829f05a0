package natsplane

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// The KV payload: Dynamo's RouterEvent
// (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs), as rmp_serde named
// maps:
//
//	RouterEvent    {worker_id: u64, storage_tier: "device" | "host_pinned" | "disk" | "external",
//	                residency_domain?: "worker" | "cache_owner", event: KvCacheEvent,
//	                state_source?: ...}
//	KvCacheEvent   {event_id: u64, data: KvCacheEventData, dp_rank: u32}
//	KvCacheEventData "cleared" | {"stored": {parent_hash: u64 | nil, start_position: u32 | nil,
//	                                         blocks: [{block_hash: u64, tokens_hash: u64,
//	                                                   mm_extra_info: ... | nil}]}}
//	                 | {"removed": {block_hashes: [u64]}}
//
// Since Dynamo #11776 (2026-07-16) a message's payload is an array of
// RouterEvents (FormBatch); before, one RouterEvent map (FormSingle). The
// first payload byte tells them apart. Up to Dynamo 0.8 the message body
// was the serde_json text of one RouterEvent with no envelope
// (FormLegacyJSON). tokens_hash is Dynamo's LocalBlockHash (XXH3-64, seed
// 1337, salted for LoRA), the same local hash as radix.Block.Local, so no
// tokens travel and none are hashed here.

// Form is the shape a KV message arrived in.
type Form uint8

const (
	FormBatch      Form = iota + 1 // envelope, payload [RouterEvent] (Dynamo #11776 on)
	FormSingle                     // envelope, payload one RouterEvent (#5624 to #11776)
	FormLegacyJSON                 // no envelope, JSON RouterEvent (Dynamo <= 0.8)
)

func (f Form) String() string {
	switch f {
	case FormBatch:
		return "batch"
	case FormSingle:
		return "single"
	case FormLegacyJSON:
		return "legacy_json"
	}
	return fmt.Sprintf("form(%d)", uint8(f))
}

// KVDrop says why one RouterEvent of a well-formed payload was skipped;
// the rest of the payload is kept.
type KVDrop uint8

const (
	// KVDropResidency: residency_domain present but nil, not a string, or
	// an unknown name; Dynamo drops these events too
	// (WireResidencyDomain::parse, UnsupportedResidencyDomain).
	KVDropResidency KVDrop = iota
	// KVDropCacheOwner: residency_domain "cache_owner", Dynamo's
	// shared-cache ownership, which kvselect does not model.
	KVDropCacheOwner
	// KVDropTier: a storage_tier kvselect does not know.
	KVDropTier
	// KVDropEmpty: a stored or removed event without blocks.
	KVDropEmpty
	numKVDrops
)

var kvDropNames = [numKVDrops]string{"unsupported_residency", "cache_owner", "unknown_tier", "empty"}

func (d KVDrop) String() string {
	if d < numKVDrops {
		return kvDropNames[d]
	}
	return fmt.Sprintf("kvdrop(%d)", uint8(d))
}

// KVBatch is one decoded KV payload. Events carry their Worker (worker_id,
// dp_rank) and EventID from the wire.
//
// Lifetime: Events and the slices inside them belong to the KVDecoder and
// are valid until its next Decode.
type KVBatch struct {
	Form    Form
	Events  []radix.Event
	Skipped [numKVDrops]uint64
}

// KVDecoder decodes KV payloads. Not safe for concurrent use; its slices
// are reused across payloads.
//
// Representation: during a Decode events[i] is the i-th kept event and
// spans[i] locates its Blocks in blocks (Stored) or its Hashes in hashes
// (Removed); slices are attached once the payload is complete, since
// appends may move the arrays. Invariant: len(events), len(blocks) and
// len(hashes) are each at most len(payload), since every one takes at
// least one byte on the wire (the reader checks every declared length
// against the bytes left), so no payload decodes into more than about 12
// times its size.
type KVDecoder struct {
	events []radix.Event
	spans  [][2]int
	blocks []radix.Block
	hashes []uint64
}

var (
	errKVShape = fmt.Errorf("%w: KV payload is neither a RouterEvent nor an array of them", ErrMalformed)
	errKVTrail = fmt.Errorf("%w: trailing bytes after the KV payload", ErrMalformed)
)

var (
	routerEventFields = [...]string{"worker_id", "storage_tier", "residency_domain", "event", "state_source"}
	kvEventFields     = [...]string{"event_id", "data", "dp_rank"}
	storeFields       = [...]string{"parent_hash", "start_position", "blocks"}
	blockFields       = [...]string{"block_hash", "tokens_hash", "mm_extra_info"}
	removeFields      = [...]string{"block_hashes"}
)

// Decode decodes an envelope's KV payload, batch or single. A payload that
// is not well formed (truncated, a wrong type, a required field missing)
// returns an error wrapping ErrMalformed and nothing of it may be applied,
// as Dynamo's serde decode fails the whole message.
func (d *KVDecoder) Decode(payload []byte) (KVBatch, error) {
	d.reset()
	var b KVBatch
	r := &msgpack.Reader{B: payload}
	c, err := r.Peek()
	if err != nil {
		return KVBatch{}, fmt.Errorf("%w: empty KV payload", ErrMalformed)
	}
	switch {
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		b.Form = FormBatch
		n, err := r.ArrayLen()
		if err != nil {
			return KVBatch{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		for range n {
			if err := d.routerEvent(r, &b); err != nil {
				d.reset()
				return KVBatch{}, fmt.Errorf("%w: RouterEvent: %v", ErrMalformed, err)
			}
		}
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		b.Form = FormSingle
		if err := d.routerEvent(r, &b); err != nil {
			d.reset()
			return KVBatch{}, fmt.Errorf("%w: RouterEvent: %v", ErrMalformed, err)
		}
	default:
		return KVBatch{}, errKVShape
	}
	if r.Left() != 0 {
		d.reset()
		return KVBatch{}, errKVTrail
	}
	d.attach()
	b.Events = d.events
	return b, nil
}

func (d *KVDecoder) reset() {
	d.events, d.spans, d.blocks, d.hashes = d.events[:0], d.spans[:0], d.blocks[:0], d.hashes[:0]
}

// attach points each event at its blocks or hashes.
func (d *KVDecoder) attach() {
	for i := range d.events {
		e, s := &d.events[i], d.spans[i]
		switch e.Kind {
		case radix.Stored:
			e.Blocks = d.blocks[s[0]:s[1]:s[1]]
		case radix.Removed:
			e.Hashes = d.hashes[s[0]:s[1]:s[1]]
		}
	}
}

// routerEvent reads one RouterEvent and keeps it or counts its drop.
func (d *KVDecoder) routerEvent(r *msgpack.Reader, b *KVBatch) error {
	var ev radix.Event
	var span [2]int
	b0, h0 := len(d.blocks), len(d.hashes)
	drop, dropped := KVDrop(0), false
	var have uint8
	err := structFields(r, routerEventFields[:], func(i int) error {
		have |= 1 << i
		switch i {
		case 0:
			v, err := u64(r)
			ev.Worker.WorkerID = v
			return err
		case 1:
			s, err := r.Str()
			if err != nil {
				return err
			}
			t, ok := radix.ParseTier(string(s))
			if !ok || len(s) == 0 {
				drop, dropped = KVDropTier, true
			}
			ev.Tier = t
			return nil
		case 2:
			if s, err := r.Str(); err == nil {
				switch string(s) {
				case "worker":
				case "cache_owner":
					drop, dropped = KVDropCacheOwner, true
				default:
					drop, dropped = KVDropResidency, true
				}
				return nil
			}
			drop, dropped = KVDropResidency, true
			return r.Skip()
		case 3:
			var err error
			span, err = d.kvEvent(r, &ev)
			return err
		}
		return r.Skip()
	})
	if err != nil {
		return err
	}
	if have&1 == 0 || have&8 == 0 {
		return errors.New("missing worker_id or event")
	}
	if !dropped && ev.Kind != radix.Cleared && span[0] == span[1] {
		drop, dropped = KVDropEmpty, true
	}
	if dropped {
		d.blocks, d.hashes = d.blocks[:b0], d.hashes[:h0]
		b.Skipped[drop]++
		return nil
	}
	d.events = append(d.events, ev)
	d.spans = append(d.spans, span)
	return nil
}

// kvEvent reads a KvCacheEvent into ev and returns the span of its blocks
// or hashes.
func (d *KVDecoder) kvEvent(r *msgpack.Reader, ev *radix.Event) (span [2]int, err error) {
	var have uint8
	err = structFields(r, kvEventFields[:], func(i int) error {
		have |= 1 << i
		switch i {
		case 0:
			v, err := u64(r)
			ev.EventID = v
			return err
		case 1:
			var err error
			span, err = d.data(r, ev)
			return err
		}
		v, err := r.U32()
		ev.Worker.DPRank = v
		return err
	})
	if err == nil && have&3 != 3 {
		err = errors.New("KvCacheEvent without event_id or data")
	}
	return span, err
}

// data reads a KvCacheEventData (externally tagged, snake_case).
func (d *KVDecoder) data(r *msgpack.Reader, ev *radix.Event) (span [2]int, err error) {
	if s, err := r.Str(); err == nil {
		if string(s) != "cleared" {
			return span, fmt.Errorf("unknown unit variant %q", s)
		}
		ev.Kind = radix.Cleared
		return span, nil
	}
	n, err := r.MapLen()
	if err != nil {
		return span, err
	}
	if n != 1 {
		return span, errors.New("data is not a one-entry map")
	}
	tag, err := r.Str()
	if err != nil {
		return span, err
	}
	switch string(tag) {
	case "stored":
		ev.Kind = radix.Stored
		span[0] = len(d.blocks)
		err = structFields(r, storeFields[:], func(i int) error {
			switch i {
			case 0:
				if r.IsNil() {
					return nil
				}
				v, err := u64(r)
				ev.ParentHash, ev.HasParent = v, true
				return err
			case 1:
				if r.IsNil() {
					return nil
				}
				v, err := r.U32()
				ev.StartPosition, ev.HasStartPosition = v, true
				return err
			}
			m, err := r.ArrayLen()
			if err != nil {
				return err
			}
			for range m {
				var blk radix.Block
				var have uint8
				if err := structFields(r, blockFields[:], func(j int) error {
					have |= 1 << j
					var err error
					switch j {
					case 0:
						blk.Hash, err = u64(r)
					case 1:
						blk.Local, err = u64(r)
					default:
						// mm_extra_info: the mm hashes are already folded
						// into tokens_hash by the publisher.
						err = r.Skip()
					}
					return err
				}); err != nil {
					return err
				}
				if have&3 != 3 {
					return errors.New("block without block_hash or tokens_hash")
				}
				d.blocks = append(d.blocks, blk)
			}
			return nil
		})
		span[1] = len(d.blocks)
	case "removed":
		ev.Kind = radix.Removed
		span[0] = len(d.hashes)
		err = structFields(r, removeFields[:], func(int) error {
			m, err := r.ArrayLen()
			if err != nil {
				return err
			}
			for range m {
				h, err := u64(r)
				if err != nil {
					return err
				}
				d.hashes = append(d.hashes, h)
			}
			return nil
		})
		span[1] = len(d.hashes)
	case "cleared":
		ev.Kind = radix.Cleared
		err = r.Skip()
	default:
		err = fmt.Errorf("unknown event %q", tag)
	}
	return span, err
}

// AppendRouterEvents appends evs as the current KV payload (FormBatch), the
// way a Dynamo worker's publisher writes it (RouterEvent::new:
// residency_domain "worker", mm_extra_info nil).
func AppendRouterEvents(dst []byte, evs []radix.Event) []byte {
	dst = msgpack.AppendArrayHeader(dst, len(evs))
	for i := range evs {
		dst = AppendRouterEvent(dst, &evs[i])
	}
	return dst
}

// AppendRouterEvent appends one RouterEvent map (the payload of FormSingle,
// or an element of FormBatch).
func AppendRouterEvent(dst []byte, e *radix.Event) []byte {
	dst = msgpack.AppendMapHeader(dst, 4)
	dst = msgpack.AppendStr(dst, "worker_id")
	dst = msgpack.AppendUint(dst, e.Worker.WorkerID)
	dst = msgpack.AppendStr(dst, "storage_tier")
	dst = msgpack.AppendStr(dst, e.Tier.String())
	dst = msgpack.AppendStr(dst, "residency_domain")
	dst = msgpack.AppendStr(dst, "worker")
	dst = msgpack.AppendStr(dst, "event")
	dst = msgpack.AppendMapHeader(dst, 3)
	dst = msgpack.AppendStr(dst, "event_id")
	dst = msgpack.AppendUint(dst, e.EventID)
	dst = msgpack.AppendStr(dst, "data")
	switch e.Kind {
	case radix.Stored:
		dst = msgpack.AppendMapHeader(dst, 1)
		dst = msgpack.AppendStr(dst, "stored")
		dst = msgpack.AppendMapHeader(dst, 3)
		dst = msgpack.AppendStr(dst, "parent_hash")
		if e.HasParent {
			dst = msgpack.AppendUint(dst, e.ParentHash)
		} else {
			dst = append(dst, 0xc0)
		}
		dst = msgpack.AppendStr(dst, "start_position")
		if e.HasStartPosition {
			dst = msgpack.AppendUint(dst, uint64(e.StartPosition))
		} else {
			dst = append(dst, 0xc0)
		}
		dst = msgpack.AppendStr(dst, "blocks")
		dst = msgpack.AppendArrayHeader(dst, len(e.Blocks))
		for _, b := range e.Blocks {
			dst = msgpack.AppendMapHeader(dst, 3)
			dst = msgpack.AppendStr(dst, "block_hash")
			dst = msgpack.AppendUint(dst, b.Hash)
			dst = msgpack.AppendStr(dst, "tokens_hash")
			dst = msgpack.AppendUint(dst, b.Local)
			dst = msgpack.AppendStr(dst, "mm_extra_info")
			dst = append(dst, 0xc0)
		}
	case radix.Removed:
		dst = msgpack.AppendMapHeader(dst, 1)
		dst = msgpack.AppendStr(dst, "removed")
		dst = msgpack.AppendMapHeader(dst, 1)
		dst = msgpack.AppendStr(dst, "block_hashes")
		dst = msgpack.AppendArrayHeader(dst, len(e.Hashes))
		for _, h := range e.Hashes {
			dst = msgpack.AppendUint(dst, h)
		}
	default:
		dst = msgpack.AppendStr(dst, "cleared")
	}
	dst = msgpack.AppendStr(dst, "dp_rank")
	return msgpack.AppendUint(dst, uint64(e.Worker.DPRank))
}

// The legacy JSON RouterEvent (serde_json of Dynamo <= 0.8's RouterEvent,
// no envelope): the same fields, data externally tagged.
type jsonRouterEvent struct {
	WorkerID    *uint64 `json:"worker_id"`
	StorageTier *string `json:"storage_tier"`
	Event       *struct {
		EventID *uint64         `json:"event_id"`
		Data    json.RawMessage `json:"data"`
		DPRank  uint32          `json:"dp_rank"`
	} `json:"event"`
}

type jsonData struct {
	Stored *struct {
		ParentHash    *uint64 `json:"parent_hash"`
		StartPosition *uint32 `json:"start_position"`
		Blocks        []struct {
			BlockHash  *uint64 `json:"block_hash"`
			TokensHash *uint64 `json:"tokens_hash"`
		} `json:"blocks"`
	} `json:"stored"`
	Removed *struct {
		BlockHashes []uint64 `json:"block_hashes"`
	} `json:"removed"`
}

// DecodeLegacyJSON decodes the JSON body of Dynamo <= 0.8 (one RouterEvent).
// It allocates: the legacy path is rare and off the fast path.
func (d *KVDecoder) DecodeLegacyJSON(body []byte) (KVBatch, error) {
	d.reset()
	var j jsonRouterEvent
	if err := json.Unmarshal(body, &j); err != nil {
		return KVBatch{}, fmt.Errorf("%w: legacy JSON RouterEvent: %v", ErrMalformed, err)
	}
	if j.WorkerID == nil || j.Event == nil || j.Event.EventID == nil || len(j.Event.Data) == 0 {
		return KVBatch{}, fmt.Errorf("%w: legacy JSON RouterEvent lacks worker_id or event", ErrMalformed)
	}
	b := KVBatch{Form: FormLegacyJSON}
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: *j.WorkerID, DPRank: j.Event.DPRank}, EventID: *j.Event.EventID}
	if j.StorageTier != nil {
		t, ok := radix.ParseTier(*j.StorageTier)
		if !ok || *j.StorageTier == "" {
			b.Skipped[KVDropTier]++
			return b, nil
		}
		ev.Tier = t
	}
	var span [2]int
	var unit string
	if json.Unmarshal(j.Event.Data, &unit) == nil {
		if unit != "cleared" {
			return KVBatch{}, fmt.Errorf("%w: legacy JSON: unknown event %q", ErrMalformed, unit)
		}
		ev.Kind = radix.Cleared
	} else {
		var data jsonData
		if err := json.Unmarshal(j.Event.Data, &data); err != nil {
			return KVBatch{}, fmt.Errorf("%w: legacy JSON data: %v", ErrMalformed, err)
		}
		switch {
		case data.Stored != nil:
			ev.Kind = radix.Stored
			if p := data.Stored.ParentHash; p != nil {
				ev.ParentHash, ev.HasParent = *p, true
			}
			if p := data.Stored.StartPosition; p != nil {
				ev.StartPosition, ev.HasStartPosition = *p, true
			}
			for _, blk := range data.Stored.Blocks {
				if blk.BlockHash == nil || blk.TokensHash == nil {
					return KVBatch{}, fmt.Errorf("%w: legacy JSON block without block_hash or tokens_hash", ErrMalformed)
				}
				d.blocks = append(d.blocks, radix.Block{Hash: *blk.BlockHash, Local: *blk.TokensHash})
			}
			span[1] = len(d.blocks)
		case data.Removed != nil:
			ev.Kind = radix.Removed
			d.hashes = append(d.hashes, data.Removed.BlockHashes...)
			span[1] = len(d.hashes)
		default:
			return KVBatch{}, fmt.Errorf("%w: legacy JSON data is neither stored, removed nor cleared", ErrMalformed)
		}
		if span[1] == 0 {
			b.Skipped[KVDropEmpty]++
			d.reset()
			return b, nil
		}
	}
	d.events = append(d.events, ev)
	d.spans = append(d.spans, span)
	d.attach()
	b.Events = d.events
	return b, nil
}
