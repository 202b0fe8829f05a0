package mesh

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// The replica-sync envelope, as Dynamo's selectors exchange it on topic
// dynamo.slot-tracker.v1 (ai-dynamo/dynamo:
// lib/kv-router/src/services/common/replica_sync.rs, ScopedReplicaEvent,
// and lib/kv-router/src/protocols.rs, ActiveSequenceEvent), written the
// way rmp_serde::to_vec_named writes it: structs as maps keyed by field
// name in declaration order, Option::None as nil, integers in their
// smallest encoding, unit enum variants as their name, struct variants as
// a one-entry map from the variant name to the struct:
//
//	{model_name: str, routing_group: str, block_size: u32,
//	 event: {request_id: str, worker: {worker_id: u64, dp_rank: u32},
//	         data: "Free" | "MarkPrefillCompleted" |
//	               {"AddRequest": {token_sequence: [u64] | nil,
//	                               track_prefill_tokens: bool,
//	                               expected_output_tokens: u32 | nil,
//	                               prefill_load_hint: {initial_effective_prefill_tokens: uint,
//	                                                   expected_prefill_duration: nil} | nil}},
//	         router_id: u64, lora_name: str | nil}}
//
// A decoder accepts what rmp_serde accepts: maps in any key order with
// unknown keys skipped, or positional arrays; missing optional fields as
// None; track_prefill_tokens defaulting to true. A legacy envelope that
// names tenant_id instead of routing_group lacks a required field and is
// rejected (Dynamo's legacy_replica_event_wire_schema_is_rejected).

// Replica-sync topics.
const (
	// ReplicaTopic carries active-sequence lifecycle events (Dynamo's).
	ReplicaTopic = "dynamo.slot-tracker.v1"
	// AffinityTopic carries session bindings (Dynamo's; see
	// affinity.go), subscribed to only with a handler installed.
	AffinityTopic = "dynamo.session-affinity.v1"
	// SnapshotTopic is kvselect's own: a peer that subscribes to it gets the
	// live local bookings once, so a joining replica catches up. Dynamo's
	// replicas never subscribe to it, so they never see it.
	SnapshotTopic = "kvselect.slot-snapshot.v1"
)

// Envelope decode errors.
var (
	// ErrEnvelope marks a payload that is not a replica envelope.
	ErrEnvelope = errors.New("zmqin: malformed replica envelope")
	// ErrLegacyEnvelope marks an envelope with tenant_id and no
	// routing_group (the schema before Dynamo's rename).
	ErrLegacyEnvelope = errors.New("zmqin: legacy replica envelope (tenant_id)")

	errTooManyHashes = fmt.Errorf("more than %d sequence hashes", maxEnvelopeHashes)
)

// maxEnvelopeHashes bounds an admission's sequence hashes (a prompt of 2 Mi
// blocks, 32 Mi tokens at block size 16): a hash takes 1 to 9 bytes on the
// wire and 8 decoded, so without it an envelope within MaxMessage could
// decode into 8 times its size.
const maxEnvelopeHashes = 1 << 21

// envelopeBound is at most the bytes AppendEnvelope adds for ev: the keys
// and headers of the largest event (an admission with every option set)
// take under 400 bytes, each string at most 5 bytes of header beyond its
// own, each hash and integer at most 9. Publishing sizes the payload with
// it: for the admission of a 274-block prompt, appending to a nil slice
// took 5.9 µs, 11 allocations and 8.4 KB (the slice grew again and again),
// a sized one 2.7 µs and one 3 KB allocation (a throwaway benchmark, load
// average 5, 2026-12-01).
func envelopeBound(ev *core.ReplicaEvent) int {
	return 400 + len(ev.ModelName) + len(ev.RoutingGroup) + len(ev.RequestID) + len(ev.LoraName) + 9*len(ev.SequenceHashes)
}

// AppendEnvelope appends ev's envelope, with routerID as its sender.
func AppendEnvelope(dst []byte, ev *core.ReplicaEvent, routerID uint64) []byte {
	dst, _ = AppendEnvelopeAt(dst, ev, routerID)
	return dst
}

// EnvelopeBound is at most the bytes AppendEnvelope appends for ev (a
// buffer of this capacity is never grown).
func EnvelopeBound(ev *core.ReplicaEvent) int { return envelopeBound(ev) }

// AppendEnvelopeAt is AppendEnvelope that also returns where, in the
// result, the envelope's event field begins: out[event:] is ev as
// Dynamo's bare ActiveSequenceEvent (what AppendSequenceEvent appends),
// so one encoding serves both forms (zmqin/natsplane publishes the
// envelopes to kvselect peers and the bare events to Dynamo routers).
func AppendEnvelopeAt(dst []byte, ev *core.ReplicaEvent, routerID uint64) (out []byte, event int) {
	dst = msgpack.AppendMapHeader(dst, 4)
	dst = msgpack.AppendStr(dst, "model_name")
	dst = msgpack.AppendStr(dst, ev.ModelName)
	dst = msgpack.AppendStr(dst, "routing_group")
	dst = msgpack.AppendStr(dst, ev.RoutingGroup)
	dst = msgpack.AppendStr(dst, "block_size")
	dst = msgpack.AppendUint(dst, uint64(ev.BlockSize))
	dst = msgpack.AppendStr(dst, "event")
	event = len(dst)
	return AppendSequenceEvent(dst, ev, routerID), event
}

// AppendSequenceEvent appends ev as Dynamo's bare ActiveSequenceEvent
// (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs), the envelope's event
// field: what Dynamo routers publish, one per message, on the NATS
// event plane's active_sequences_events topic (zmqin/natsplane).
func AppendSequenceEvent(dst []byte, ev *core.ReplicaEvent, routerID uint64) []byte {
	dst = msgpack.AppendMapHeader(dst, 5)
	dst = msgpack.AppendStr(dst, "request_id")
	dst = msgpack.AppendStr(dst, ev.RequestID)
	dst = msgpack.AppendStr(dst, "worker")
	dst = msgpack.AppendMapHeader(dst, 2)
	dst = msgpack.AppendStr(dst, "worker_id")
	dst = msgpack.AppendUint(dst, ev.Worker.WorkerID)
	dst = msgpack.AppendStr(dst, "dp_rank")
	dst = msgpack.AppendUint(dst, uint64(ev.Worker.DPRank))
	dst = msgpack.AppendStr(dst, "data")
	switch ev.Kind {
	case core.ReplicaAdd:
		dst = msgpack.AppendMapHeader(dst, 1)
		dst = msgpack.AppendStr(dst, "AddRequest")
		dst = msgpack.AppendMapHeader(dst, 4)
		dst = msgpack.AppendStr(dst, "token_sequence")
		dst = msgpack.AppendArrayHeader(dst, len(ev.SequenceHashes))
		for _, h := range ev.SequenceHashes {
			dst = msgpack.AppendUint(dst, h)
		}
		dst = msgpack.AppendStr(dst, "track_prefill_tokens")
		dst = msgpack.AppendBool(dst, ev.TrackPrefillTokens)
		dst = msgpack.AppendStr(dst, "expected_output_tokens")
		if ev.ExpectedOutputTokens != nil {
			dst = msgpack.AppendUint(dst, uint64(*ev.ExpectedOutputTokens))
		} else {
			dst = append(dst, 0xc0)
		}
		dst = msgpack.AppendStr(dst, "prefill_load_hint")
		if ev.TrackPrefillTokens {
			dst = msgpack.AppendMapHeader(dst, 2)
			dst = msgpack.AppendStr(dst, "initial_effective_prefill_tokens")
			dst = msgpack.AppendUint(dst, uint64(max(0, ev.EffectivePrefillTokens)))
			dst = msgpack.AppendStr(dst, "expected_prefill_duration")
			dst = append(dst, 0xc0)
		} else {
			dst = append(dst, 0xc0)
		}
	case core.ReplicaPrefillCompleted:
		dst = msgpack.AppendStr(dst, "MarkPrefillCompleted")
	default:
		dst = msgpack.AppendStr(dst, "Free")
	}
	dst = msgpack.AppendStr(dst, "router_id")
	dst = msgpack.AppendUint(dst, routerID)
	dst = msgpack.AppendStr(dst, "lora_name")
	return msgpack.AppendOptStr(dst, ev.LoraName)
}

// DecodeEnvelope decodes one envelope into ev (strings freshly allocated:
// ev keeps nothing of payload). ev.Origin is the sender's router_id. The
// hashes go into ev's own SequenceHashes when it has the room (a decoder
// reusing its events, zmqin/natsplane's, allocates none), else into a new
// slice: a caller that keeps a decoded event's hashes passes a fresh ev.
func DecodeEnvelope(payload []byte, ev *core.ReplicaEvent) error {
	*ev = core.ReplicaEvent{SequenceHashes: ev.SequenceHashes[:0]}
	r := &msgpack.Reader{B: payload}
	var have [len(envelopeFields)]bool
	tenant := false
	err := structFields(r, envelopeFields[:], func(i int) error {
		have[i] = true
		switch i {
		case 0:
			return strField(r, &ev.ModelName)
		case 1:
			return strField(r, &ev.RoutingGroup)
		case 2:
			v, err := r.U32()
			ev.BlockSize = v
			return err
		case 3:
			return decodeEvent(r, ev)
		case 4:
			tenant = true
			return r.Skip()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	if r.Left() != 0 {
		return fmt.Errorf("%w: trailing bytes", ErrEnvelope)
	}
	if !have[1] && tenant {
		return ErrLegacyEnvelope
	}
	for i, ok := range have[:4] {
		if !ok {
			return fmt.Errorf("%w: missing field %s", ErrEnvelope, envelopeFields[i])
		}
	}
	return nil
}

// DecodeSequenceEvent decodes one bare ActiveSequenceEvent (see
// AppendSequenceEvent) into ev, as DecodeEnvelope decodes its event field
// (ev's SequenceHashes reused likewise), ev.Origin the sender's
// router_id; the partition fields stay empty. An error wraps ErrEnvelope.
func DecodeSequenceEvent(payload []byte, ev *core.ReplicaEvent) error {
	*ev = core.ReplicaEvent{SequenceHashes: ev.SequenceHashes[:0]}
	r := &msgpack.Reader{B: payload}
	if err := decodeEvent(r, ev); err != nil {
		return fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	if r.Left() != 0 {
		return fmt.Errorf("%w: trailing bytes", ErrEnvelope)
	}
	return nil
}

// envelopeFields are ScopedReplicaEvent's fields in declaration order (an
// array form is positional), then the legacy key recognized to name the
// failure.
var envelopeFields = [...]string{"model_name", "routing_group", "block_size", "event", "tenant_id"}

var eventFields = [...]string{"request_id", "worker", "data", "router_id", "lora_name"}

var workerFields = [...]string{"worker_id", "dp_rank"}

var addFields = [...]string{"token_sequence", "track_prefill_tokens", "expected_output_tokens", "prefill_load_hint"}

var hintFields = [...]string{"initial_effective_prefill_tokens", "expected_prefill_duration"}

func decodeEvent(r *msgpack.Reader, ev *core.ReplicaEvent) error {
	var have [5]bool
	err := structFields(r, eventFields[:], func(i int) error {
		have[i] = true
		switch i {
		case 0:
			return strField(r, &ev.RequestID)
		case 1:
			var seen [2]bool
			err := structFields(r, workerFields[:], func(j int) error {
				seen[j] = true
				if j == 0 {
					v, neg, err := r.Integer()
					if err == nil && neg {
						err = msgpack.ErrType
					}
					ev.Worker.WorkerID = v
					return err
				}
				v, err := r.U32()
				ev.Worker.DPRank = v
				return err
			})
			if err == nil && !seen[0] {
				err = errors.New("worker without worker_id")
			}
			return err
		case 2:
			return decodeData(r, ev)
		case 3:
			v, neg, err := r.Integer()
			if err == nil && neg {
				err = msgpack.ErrType
			}
			ev.Origin = core.Origin(v)
			return err
		case 4:
			if r.IsNil() {
				return nil
			}
			return strField(r, &ev.LoraName)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, ok := range have[:4] {
		if !ok {
			return fmt.Errorf("event without %s", eventFields[i])
		}
	}
	return nil
}

// decodeData reads an ActiveSequenceEventData: a unit variant as its name
// (or a one-entry map to nil), AddRequest as a one-entry map.
func decodeData(r *msgpack.Reader, ev *core.ReplicaEvent) error {
	c, err := r.Peek()
	if err != nil {
		return err
	}
	if c == 0xc0 {
		return errors.New("data is nil")
	}
	var name []byte
	isMap := false
	if n, err := r.MapLen(); err == nil {
		if n != 1 {
			return errors.New("data is not a one-entry map")
		}
		isMap = true
	} else if err != msgpack.ErrType {
		return err
	}
	if name, err = r.Str(); err != nil {
		return err
	}
	switch string(name) {
	case "Free":
		ev.Kind = core.ReplicaFree
	case "MarkPrefillCompleted":
		ev.Kind = core.ReplicaPrefillCompleted
	case "AddRequest":
		if !isMap {
			return errors.New("AddRequest without its fields")
		}
		ev.Kind = core.ReplicaAdd
		return decodeAdd(r, ev)
	default:
		return fmt.Errorf("unknown event %q", name)
	}
	if isMap {
		// A unit variant written as {"Free": nil}.
		return r.Skip()
	}
	return nil
}

func decodeAdd(r *msgpack.Reader, ev *core.ReplicaEvent) error {
	ev.TrackPrefillTokens = true // serde default
	return structFields(r, addFields[:], func(i int) error {
		switch i {
		case 0:
			if r.IsNil() {
				return nil
			}
			n, err := r.ArrayLen()
			if err != nil {
				return err
			}
			if n > maxEnvelopeHashes {
				return errTooManyHashes
			}
			// Into ev's own slice when it has the room: a decoder of one
			// event at a time (zmqin/natsplane's bookings) reuses it. Its
			// decode, allocating per event, took 1.7% of the process in a
			// CPU profile of three NATS replicas at C1024 (2026-12-02).
			if ev.SequenceHashes != nil && cap(ev.SequenceHashes) >= n {
				ev.SequenceHashes = ev.SequenceHashes[:n]
			} else {
				ev.SequenceHashes = make([]uint64, n)
			}
			return r.Uints(ev.SequenceHashes)
		case 1:
			c, err := r.Peek()
			if err != nil {
				return err
			}
			if c != 0xc2 && c != 0xc3 {
				return msgpack.ErrType
			}
			r.Off++
			ev.TrackPrefillTokens = c == 0xc3
			return nil
		case 2:
			if r.IsNil() {
				return nil
			}
			v, err := r.U32()
			ev.ExpectedOutputTokens = &v
			return err
		case 3:
			if r.IsNil() {
				return nil
			}
			return structFields(r, hintFields[:], func(j int) error {
				if j == 0 {
					v, neg, err := r.Integer()
					if err == nil && (neg || v > math.MaxInt64) {
						err = msgpack.ErrType
					}
					ev.EffectivePrefillTokens = int64(v)
					return err
				}
				return r.Skip()
			})
		}
		return nil
	})
}

// structFields reads a struct written as a map or a positional array
// (msgpack.Reader.Struct).
func structFields(r *msgpack.Reader, fields []string, field func(i int) error) error {
	return r.Struct(fields, field)
}

// strField reads a str into *dst (a copy).
func strField(r *msgpack.Reader, dst *string) error {
	b, err := r.Str()
	if err != nil {
		return err
	}
	*dst = string(b)
	return nil
}
