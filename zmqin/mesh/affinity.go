package mesh

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// The session-affinity channel of the replica mesh: bindings on topic
// dynamo.session-affinity.v1, one AffinityBindingEvent per message
// (ai-dynamo/dynamo:lib/kv-router/src/services/common/replica_sync.rs,
// and affinity/replication.rs in the later tree), the partition flattened,
// as rmp_serde::to_vec_named writes it:
//
//	{model_name: str, routing_group: str, session_id: str, worker_id: u64,
//	 dp_rank: u32 | nil, sequence: u64, writer_id: u64}
//
// Outbound bindings go through their own bounded queue (4,096, the
// reference's), dropped when it is full and counted; a mesh subscribes to
// the topic only once a handler is installed (HandleAffinity), as the
// reference subscribes only with affinity enabled. Received bindings are
// applied on the peer's receive goroutine (core.Service.ApplyAffinity
// takes one shard lock per event), after the mesh drops its own.

// AffinityApplier is what receives peers' bindings: *core.Service.
type AffinityApplier interface {
	ApplyAffinity(evs []core.AffinityEvent)
}

type affinityBox struct{ AffinityApplier }

// DefaultAffinityOutbound bounds the queued outbound bindings.
const DefaultAffinityOutbound = 4096

// affinityStats are the channel's counters.
type affinityStats struct {
	published, outDropped      atomic.Uint64
	received, applied, dropped atomic.Uint64
}

var affinityFields = [...]string{"model_name", "routing_group", "session_id", "worker_id", "dp_rank", "sequence", "writer_id"}

// AppendAffinity appends ev's binding event.
func AppendAffinity(dst []byte, ev *core.AffinityEvent) []byte {
	dst = msgpack.AppendMapHeader(dst, len(affinityFields))
	dst = msgpack.AppendStr(dst, "model_name")
	dst = msgpack.AppendStr(dst, ev.ModelName)
	dst = msgpack.AppendStr(dst, "routing_group")
	dst = msgpack.AppendStr(dst, ev.RoutingGroup)
	dst = msgpack.AppendStr(dst, "session_id")
	dst = msgpack.AppendStr(dst, ev.SessionID)
	dst = msgpack.AppendStr(dst, "worker_id")
	dst = msgpack.AppendUint(dst, ev.WorkerID)
	dst = msgpack.AppendStr(dst, "dp_rank")
	if ev.HasDPRank {
		dst = msgpack.AppendUint(dst, uint64(ev.DPRank))
	} else {
		dst = append(dst, 0xc0)
	}
	dst = msgpack.AppendStr(dst, "sequence")
	dst = msgpack.AppendUint(dst, ev.Sequence)
	dst = msgpack.AppendStr(dst, "writer_id")
	return msgpack.AppendUint(dst, ev.WriterID)
}

// ErrAffinityEvent marks a payload that is not a binding event.
var ErrAffinityEvent = errors.New("zmqin: malformed session affinity event")

// DecodeAffinity decodes one binding event (a map in any key order, unknown
// keys skipped, or a positional array; every field but dp_rank required).
// ev keeps nothing of payload.
func DecodeAffinity(payload []byte, ev *core.AffinityEvent) error {
	*ev = core.AffinityEvent{}
	r := &msgpack.Reader{B: payload}
	var have [len(affinityFields)]bool
	u64 := func(dst *uint64) error {
		v, neg, err := r.Integer()
		if err == nil && neg {
			err = msgpack.ErrType
		}
		*dst = v
		return err
	}
	err := structFields(r, affinityFields[:], func(i int) error {
		have[i] = true
		switch i {
		case 0:
			return strField(r, &ev.ModelName)
		case 1:
			return strField(r, &ev.RoutingGroup)
		case 2:
			return strField(r, &ev.SessionID)
		case 3:
			return u64(&ev.WorkerID)
		case 4:
			if r.IsNil() {
				return nil
			}
			v, err := r.U32()
			ev.DPRank, ev.HasDPRank = v, true
			return err
		case 5:
			return u64(&ev.Sequence)
		default:
			return u64(&ev.WriterID)
		}
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrAffinityEvent, err)
	}
	if r.Left() != 0 {
		return fmt.Errorf("%w: trailing bytes", ErrAffinityEvent)
	}
	for i, ok := range have {
		if !ok && i != 4 {
			return fmt.Errorf("%w: missing field %s", ErrAffinityEvent, affinityFields[i])
		}
	}
	return nil
}

var affinityTopicBytes = []byte(AffinityTopic)

// HandleAffinity installs the applier of peers' bindings; call it before
// Start: the peers' subscriptions then include AffinityTopic.
func (m *Mesh) HandleAffinity(a AffinityApplier) { m.aff.Store(&affinityBox{a}) }

// PublishAffinity queues a binding for the peers without blocking
// (core.AffinitySink): a full queue drops it, counted. The event is
// encoded on the caller's goroutine, so nothing of ev is kept.
func (m *Mesh) PublishAffinity(ev *core.AffinityEvent) {
	payload := AppendAffinity(nil, ev)
	select {
	case m.affOut <- payload:
		m.ast.published.Add(1)
	default:
		m.ast.outDropped.Add(1)
	}
}

// handleAffinity decodes and applies one received binding.
func (m *Mesh) handleAffinity(payload []byte) {
	box := m.aff.Load()
	if box == nil {
		m.st.dropped[DropTopic].Add(1)
		return
	}
	var evs [1]core.AffinityEvent
	if err := DecodeAffinity(payload, &evs[0]); err != nil {
		m.st.dropped[DropUndecodable].Add(1)
		return
	}
	if evs[0].WriterID == m.id {
		m.st.dropped[DropOwn].Add(1)
		return
	}
	m.ast.applied.Add(1)
	box.ApplyAffinity(evs[:])
}
