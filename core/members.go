package core

import (
	"fmt"
	"slices"
	"sync"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// members is a partition's schedulable membership: which workers are
// attached, the ranks each one holds loads for, those loads, and the block
// size and eagle flag the members fix. The partition owns it, behind its
// own mutex; everything else is derived from it (the snapshot selections
// read, the service's schedulable and listener counts). Catalog changes
// call the partition's methods below while holding Service.mu (for the
// catalog entry), so the lock order is Service.mu, then members.mu.
// Selection paths never take it.
type members struct {
	mu sync.Mutex
	// blockSize is 0 until the first schedulable worker (or a restore)
	// fixes it; it never changes after (Dynamo's indexer registry keeps a
	// partition's block size too).
	blockSize uint32
	isEagle   bool
	workers   map[uint64]*member
	// ranks is the sum of the members' rankSize, kept by attach and
	// detach (the listener limit reads it on every registration).
	ranks int
	// loads are the attached ranks' load accounting. A rank that leaves
	// is retired and deleted; a rank that comes back gets a fresh
	// WorkerLoad. Invariant: every rank of every member has one.
	loads map[radix.WorkerKey]*sched.WorkerLoad
}

// member is one attached worker: the catalog entry that attached it (a
// re-registration in place replaces it) and the ranks holding loads.
type member struct {
	e                   *catalogEntry
	rankStart, rankSize uint32
}

// attached reports whether worker id is a member.
func (p *partition) attached(id uint64) bool {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.workers[id] != nil
}

// memberRanks is the number of ranks worker id holds loads for (0 when
// not a member).
func (p *partition) memberRanks(id uint64) int {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if m := p.m.workers[id]; m != nil {
		return int(m.rankSize)
	}
	return 0
}

// heldRanks is the number of ranks the members hold loads for.
func (p *partition) heldRanks() int {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.ranks
}

// blockSize is the partition's block size, 0 while none is fixed.
func (p *partition) blockSize() uint32 {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.blockSize
}

// fixBlockSize fixes the block size of a partition that has none yet; it
// reports the one fixed and false when another is.
func (p *partition) fixBlockSize(bs uint32) (uint32, bool) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.m.blockSize != 0 && p.m.blockSize != bs {
		return p.m.blockSize, false
	}
	p.m.blockSize = bs
	return bs, true
}

// conflict is the reason a schedulable record f of worker id cannot join:
// another block size, or another eagle mode than the other members'; ""
// when it can. movingIn: the worker comes from another partition (or is
// new), so its own membership here, if any, does not count.
func (p *partition) conflict(id uint64, f *WorkerFields, movingIn bool) string {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if bs := *f.BlockSize; p.m.blockSize != 0 && p.m.blockSize != bs {
		return fmt.Sprintf("reconciliation failed: block_size mismatch for model=%s routing_group=%s: existing=%d requested=%d", p.model, p.group, p.m.blockSize, bs)
	}
	others := len(p.m.workers)
	if p.m.workers[id] != nil && !movingIn {
		others--
	}
	if eagle := deref(f.IsEagle, false); others > 0 && p.m.isEagle != eagle {
		return fmt.Sprintf("reconciliation failed: is_eagle mismatch for model=%s routing_group=%s: existing=%t requested=%t", p.model, p.group, p.m.isEagle, eagle)
	}
	return ""
}

// attach makes e's worker a member, or updates it in place: the block size
// and eagle flag fixed by the first member, a load per rank of the
// record's range, the ranks of the previous range outside it retired. It
// reports whether some rank was retired (its bookings are released in
// phase 2).
func (p *partition) attach(id uint64, e *catalogEntry, cfg *sched.Config) (retired bool) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.m.blockSize == 0 {
		p.m.blockSize = *e.rec.BlockSize
	}
	old := p.m.workers[id]
	if len(p.m.workers) == 0 || (old != nil && len(p.m.workers) == 1) {
		p.m.isEagle = deref(e.rec.IsEagle, false)
	}
	start, size := e.rec.dpRange()
	if old != nil {
		for r := old.rankStart; r < old.rankStart+old.rankSize; r++ {
			if r < start || r >= start+size {
				p.retireLocked(radix.WorkerKey{WorkerID: id, DPRank: r})
				retired = true
			}
		}
	}
	for r := start; r < start+size; r++ {
		k := radix.WorkerKey{WorkerID: id, DPRank: r}
		if p.m.loads[k] == nil {
			p.m.loads[k] = sched.NewWorkerLoad(k, cfg)
		}
	}
	if old != nil {
		p.m.ranks -= int(old.rankSize)
	}
	p.m.workers[id] = &member{e: e, rankStart: start, rankSize: size}
	p.m.ranks += int(size)
	return retired
}

// detach removes worker id from the members, retiring every rank's load:
// no booking lands on them after, and phase 2 releases the bookings they
// hold. It reports whether the worker was a member.
func (p *partition) detach(id uint64) bool {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	m := p.m.workers[id]
	if m == nil {
		return false
	}
	delete(p.m.workers, id)
	p.m.ranks -= int(m.rankSize)
	for r := m.rankStart; r < m.rankStart+m.rankSize; r++ {
		p.retireLocked(radix.WorkerKey{WorkerID: id, DPRank: r})
	}
	return true
}

// retireLocked retires one rank's load. Under p.m.mu.
func (p *partition) retireLocked(k radix.WorkerKey) {
	if wl := p.m.loads[k]; wl != nil {
		wl.Retire()
		delete(p.m.loads, k)
	}
}

// publish rebuilds the partition's snapshot from its members: the one
// place a snapshot is made (Service.publishLocked decides when). Under
// Service.mu, as it reads the members' catalog entries.
func (p *partition) publish() {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	sn := &snapshot{blockSize: p.m.blockSize, isEagle: p.m.isEagle}
	ids := make([]uint64, 0, len(p.m.workers))
	for id := range p.m.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := p.m.workers[id].e
		w := schedWorker(&e.rec)
		v := workerView{
			endpoint:      deref(e.rec.Endpoint, ""),
			totalKVBlocks: int64(deref(e.rec.TotalKVBlocks, 0)),
			maxBatched:    int64(deref(e.rec.MaxNumBatchedTokens, 0)),
			dpStart:       w.DPStart,
			hintType:      deref(e.rec.RouterHintWorkerType, ""),
			hintEndpoints: e.rec.RouterHintSourceControlEndpoints,
			stateAgent:    deref(e.rec.KVEventSourceMode, "") == StateAgentV2,
			adapters:      newAdapterSet(e.rec.LoraAdapters, e.engineAdapters),
		}
		sn.hintCapable = sn.hintCapable || v.hintType != ""
		sn.anyAdapters = sn.anyAdapters || len(v.adapters) > 0
		for r := w.DPStart; r < w.DPStart+w.DPSize; r++ {
			v.loads = append(v.loads, p.m.loads[radix.WorkerKey{WorkerID: id, DPRank: r}])
		}
		if e.engineDown {
			sn.held, sn.heldViews = append(sn.held, id), append(sn.heldViews, v)
			continue
		}
		sn.workers = append(sn.workers, w)
		sn.views = append(sn.views, v)
		sn.ranks += int(w.DPSize)
	}
	p.snap.Store(sn)
}

// schedulableWorkers counts the schedulable workers of every partition,
// from their published snapshots.
func (s *Service) schedulableWorkers() int64 {
	n := 0
	for _, p := range *s.parts.Load() {
		n += len(p.snap.Load().workers)
	}
	return int64(n)
}

// listenerRanks counts the KV-event listener ranks of the attached workers
// (0 without KV events).
func (s *Service) listenerRanks() int {
	if !s.listening {
		return 0
	}
	n := 0
	for _, p := range *s.parts.Load() {
		n += p.heldRanks()
	}
	return n
}
