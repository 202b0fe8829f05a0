package zmqin

import (
	"context"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sync/semaphore"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// wItem is one unit of a writer's work.
type wItem struct {
	op   uint8
	sink core.EventSink
	buf  *evBuf          // opEvents: the batch's events; released after apply
	key  radix.WorkerKey // opClear: the rank to clear
	done chan struct{}   // opBarrier: closed when reached
}

const (
	opEvents uint8 = iota
	opClear
	opBarrier
)

// writer applies the decoded batches of the workers mapped to it, in queue
// order. Its goroutine is the only caller of its workers' sinks, which is
// what makes "events of one worker arrive from one goroutine at a time"
// (core.EventSink) hold.
type writer struct {
	in *Ingress
	q  chan wItem // closed by Ingress.Close after every listener stopped

	// scratch and pending are owned by the writer goroutine.
	scratch []radix.Event
	pending []*evBuf

	// room holds Config.MaxWriterQueueBytes: an opEvents item takes its
	// evBuf's size from it (capped at the whole, so that a batch larger
	// than the bound still passes alone) before it is queued and gives it
	// back once applied. Waiters are served in order, so a large batch
	// is not passed over by small ones.
	room *semaphore.Weighted
}

func (w *writer) enqueue(it wItem) { w.q <- it }

// hold takes room for a batch of n bytes about to be queued, waiting
// while the writer holds too much; false when ctx ended first.
func (w *writer) hold(ctx context.Context, n int64) bool {
	if w.room.Acquire(ctx, w.weight(n)) != nil {
		return false
	}
	w.in.st.writerBytes.Add(n)
	return true
}

// unhold gives back the room of batches of n bytes in all, weighing
// weight (the sum of their weights).
func (w *writer) unhold(n, weight int64) {
	w.in.st.writerBytes.Add(-n) // first: the gauge never counts a batch twice
	w.room.Release(weight)
}

// weight is what a batch of n bytes takes of room.
func (w *writer) weight(n int64) int64 { return min(n, int64(w.in.cfg.MaxWriterQueueBytes)) }

// barrier returns when every item queued before it has been handled.
func (w *writer) barrier() {
	done := make(chan struct{})
	w.q <- wItem{op: opBarrier, done: done}
	<-done
}

func (w *writer) run() {
	defer w.in.wg.Done()
	var next *wItem
	for {
		var it wItem
		if next != nil {
			it, next = *next, nil
		} else {
			var ok bool
			if it, ok = <-w.q; !ok {
				return
			}
		}
		switch it.op {
		case opClear:
			it.sink.ClearRank(it.key)
		case opBarrier:
			close(it.done)
		case opEvents:
			// Coalesce the batches already queued for the same sink into
			// one ApplyBatch call, up to MaxApplyEvents: one shard lock
			// per run instead of one per wire batch.
			w.scratch = append(w.scratch[:0], it.buf.evs...)
			w.pending = append(w.pending[:0], it.buf)
		more:
			for len(w.scratch) < w.in.cfg.MaxApplyEvents {
				select {
				case n, ok := <-w.q:
					if !ok {
						break more
					}
					if n.op != opEvents || n.sink != it.sink {
						next = &n
						break more
					}
					w.scratch = append(w.scratch, n.buf.evs...)
					w.pending = append(w.pending, n.buf)
				default:
					break more
				}
			}
			it.sink.ApplyBatch(w.scratch)
			w.in.st.batchesApplied.Add(uint64(len(w.pending)))
			w.in.st.eventsApplied.Add(uint64(len(w.scratch)))
			clear(w.scratch)
			var applied, weight int64
			for i, b := range w.pending {
				applied += b.size
				weight += w.weight(b.size)
				putEvBuf(b)
				w.pending[i] = nil
			}
			w.unhold(applied, weight)
		}
	}
}

// evBuf owns a copy of one decoded batch's events: evs[i].Blocks and
// evs[i].Hashes point into blocks and hashes.
type evBuf struct {
	evs    []radix.Event
	blocks []radix.Block
	hashes []uint64
	size   int64 // retained() once filled: what the writer's bound counts
}

var evBufPool = sync.Pool{New: func() any { return new(evBuf) }}

// copyEvents returns a pooled evBuf holding a deep copy of evs (which alias
// a Decoder's memory). The writer releases it after applying.
func copyEvents(evs []radix.Event) *evBuf {
	b := evBufPool.Get().(*evBuf)
	nb, nh := 0, 0
	for i := range evs {
		nb += len(evs[i].Blocks)
		nh += len(evs[i].Hashes)
	}
	b.blocks = slices.Grow(b.blocks[:0], nb)
	b.hashes = slices.Grow(b.hashes[:0], nh)
	b.evs = append(b.evs[:0], evs...)
	for i := range b.evs {
		e := &b.evs[i]
		if e.Blocks != nil {
			lo := len(b.blocks)
			b.blocks = append(b.blocks, e.Blocks...)
			e.Blocks = b.blocks[lo:len(b.blocks):len(b.blocks)]
		}
		if e.Hashes != nil {
			lo := len(b.hashes)
			b.hashes = append(b.hashes, e.Hashes...)
			e.Hashes = b.hashes[lo:len(b.hashes):len(b.hashes)]
		}
	}
	b.size = int64(b.retained())
	return b
}

func putEvBuf(b *evBuf) {
	clear(b.evs)
	b.evs = b.evs[:0]
	if b.retained() <= maxPooledEvBytes {
		evBufPool.Put(b)
	}
}

// maxPooledEvBytes bounds what a pooled evBuf keeps between batches: a
// batch copied from a huge message (MaxFrameSize allows 64 MiB) is dropped
// after use instead of pinning its memory in the pool. 1 MiB holds about
// 64 Ki blocks, far beyond a vLLM step's batch.
const maxPooledEvBytes = 1 << 20

// retained is the memory b keeps for its next use.
func (b *evBuf) retained() int {
	return cap(b.evs)*int(unsafe.Sizeof(radix.Event{})) + cap(b.blocks)*int(unsafe.Sizeof(radix.Block{})) + 8*cap(b.hashes)
}
