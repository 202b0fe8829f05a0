package mesh

import (
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/budget"
)

// The outbound half of the mesh: Publish queues this process's events,
// the publisher goroutine batches them to the PUB socket.

// Publish queues ev for the peers without blocking (core.ReplicaSink): it
// encodes the envelope on the caller's goroutine, so nothing of ev is kept.
func (m *Mesh) Publish(ev *core.ReplicaEvent) {
	payload := AppendEnvelope(make([]byte, 0, envelopeBound(ev)), ev, m.id)
	n := int64(cap(payload))
	if budget.Reserve(&m.st.outBytes, n, int64(m.cfg.MaxQueueBytes)) {
		if m.out.Put(payload) {
			m.st.published.Add(1)
			return
		}
		m.st.outBytes.Add(-n)
	}
	m.st.outDropped.Add(1)
}

var (
	replicaTopicBytes  = []byte(ReplicaTopic)
	snapshotTopicBytes = []byte(SnapshotTopic)
)

// publish sends the queued events to every peer subscribed to
// ReplicaTopic, until Close, in batches: the first event queued, then,
// after PublishWait, what has been queued meanwhile (all of it; when it
// took PublishBatch events or more at once it does not wait). Events queue
// without waking the publisher while it waits; the batch reaches each
// peer's writer at once, which writes it with one flush, and the peer's
// reader takes it in one read. Sent one by one, each event of a C1024
// lifecycle load cost a flush and a wake-up of the publisher and of the
// peer's writer: in CPU profiles of `kvselect bench --replicas 2`
// (2026-12-01, load average 2 to 2.5) the writers (PubSocket.serve) took
// 3.2% of the process and this loop 1.5%; batched, 1.2% and 1.0%. The
// wait adds at most PublishWait to the propagation lag.
func (m *Mesh) publish() {
	defer m.wg.Done()
	var batch, more [][]byte
	var t *time.Timer
	for {
		select {
		case <-m.ctx.Done():
			return
		case payload := <-m.affOut:
			m.sendAffinity(payload)
			continue
		case <-m.out.Ready():
		}
		if batch = m.out.Take(batch); len(batch) == 0 {
			continue // taken by the last round's second take
		}
		if m.cfg.PublishWait > 0 && len(batch) < m.cfg.PublishBatch {
			if t == nil {
				t = time.NewTimer(m.cfg.PublishWait)
			} else {
				t.Reset(m.cfg.PublishWait)
			}
		wait:
			for {
				select {
				case <-t.C:
					break wait
				case payload := <-m.affOut:
					m.sendAffinity(payload) // not held back by the booking batch
				case <-m.ctx.Done():
					return
				}
			}
			more = m.out.Take(more)
		}
		if !m.send(batch) || !m.send(more) {
			return
		}
		// Let go of the sent envelopes now (the lengths stay: Take reads
		// them to decide whether to keep the slices).
		clear(batch)
		clear(more)
		more = more[:0]
	}
}

// send publishes taken envelopes to the peers, PublishBatch at a time,
// letting session bindings through between two chunks, and releases them
// from the queue's bound; false when the mesh closes.
func (m *Mesh) send(payloads [][]byte) bool {
	for i := 0; i < len(payloads); i += m.cfg.PublishBatch {
		if i > 0 {
			select {
			case <-m.ctx.Done():
				return false
			case payload := <-m.affOut:
				m.sendAffinity(payload)
			default:
			}
		}
		chunk := payloads[i:min(len(payloads), i+m.cfg.PublishBatch)]
		for _, payload := range chunk {
			m.st.outBytes.Add(-int64(cap(payload)))
			m.pub.Send(ReplicaTopic, [][]byte{replicaTopicBytes, payload})
		}
		m.st.sent.Add(uint64(len(chunk)))
		m.out.Release(len(chunk))
	}
	return true
}

// sendAffinity publishes one session binding. Bindings are few: each goes
// out at once, never waiting for a booking batch.
func (m *Mesh) sendAffinity(payload []byte) {
	m.pub.Send(AffinityTopic, [][]byte{affinityTopicBytes, payload})
}
