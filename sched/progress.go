package sched

import "github.com/kvselect/kvselect/radix"

// Prefill progress (A_c). A_p counts a booked prompt in full until its
// first token (prefill_complete), however far its prefill has gone. The
// worker's own KV events say how far: an engine publishes BlockStored for
// the blocks each step computes, chunk by chunk through a chunked prefill
// (vLLM v1 caches a request's full blocks in the step that computes them:
// vllm-project/vllm:vllm/v1/core/kv_cache_manager.py, allocate_slots).
// The host passes each such event to WorkerLoad.CreditStored, which finds
// the booking the blocks belong to and credits their tokens to it, and
// A_p − A_c is the prefill really left ahead of a new request.
//
// A booking is recognised by its own sequence hashes: the event holds the
// booking's next block (the one after its cached prefix, or after the
// blocks already credited), whose local hash L satisfies seq[k] =
// radix.SeqHash(seq[k-1], L); once one event matched, the next chunks are
// recognised in O(1) by their parent, the engine hash of the last block
// credited. Blocks of anything else (output blocks, requests booked on
// another selector, sync or warm-up blocks) match no booking and credit
// nothing. Invariants:
//
//   - 0 <= s.credited <= the prefill s booked; a slot gets no credit once
//     its prefill is completed or released, and what it had leaves A_c
//     with it (clearPrefill).
//   - A_c == Σ credited over the slots of the worker rank, and A_pairs ==
//     Σ pairs, once no call is in flight; the reader clamps A_c to A_p.
//   - The credit queue holds the slots that may still take credit, in
//     booking order: booked with a pending prefill, sequence hashes and a
//     block size, and not yet seen completed, released or fully credited
//     (CreditStored unlinks those as it passes them, Release always).
//   - One CreditStored computes at most maxCreditScan sequence hashes, so
//     a burst of pending bookings cannot make the event path quadratic; an
//     event it gives up on credits nothing (the prefill ahead then looks
//     larger than it is, as without events).

// maxCreditScan bounds the radix.SeqHash calls of one CreditStored (about
// 5 µs of hashing).
const maxCreditScan = 512

// creditQueue is a worker rank's FIFO of slots that can take credit,
// linked through Slot.next/prev. Under WorkerLoad.mu.
type creditQueue struct{ head, tail *Slot }

func (q *creditQueue) push(s *Slot) {
	s.prev, s.next, s.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = s
	} else {
		q.head = s
	}
	q.tail = s
}

func (q *creditQueue) remove(s *Slot) {
	if !s.queued {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		q.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		q.tail = s.prev
	}
	s.prev, s.next, s.queued = nil, nil, false
}

// CreditStored credits the blocks of one device-tier BlockStored event of
// this worker rank (parent: the engine hash of the block before the
// first, when hasParent) to the pending booking they belong to, oldest
// booking first; a booking gets at most its booked prefill. Blocks that
// belong to no pending booking credit nothing. Allocation-free; takes
// w.mu.
func (w *WorkerLoad) CreditStored(parent uint64, hasParent bool, blocks []radix.Block) {
	if len(blocks) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// The next chunk of a prefill in progress: its parent is the last
	// block credited to the slot.
	if hasParent {
		for s := w.credit.head; s != nil; s = s.next {
			if s.resumed && s.lastStored == parent {
				w.creditSlot(s, blocks)
				return
			}
		}
	}
	// The first chunk of a booking: look for its next block in the
	// event, within the scan budget.
	budget := maxCreditScan
	for s := w.credit.head; s != nil && budget > 0; {
		next := s.next
		switch {
		case s.prefill.Load() == 0:
			// Completed or released: unlink (Release would too).
			s.dropCredit()
			w.credit.remove(s)
		case !s.resumed:
			for j := range blocks[:min(len(blocks), budget)] {
				if s.isBlock(s.cursor, blocks[j].Local) {
					w.creditSlot(s, blocks[j:])
					return
				}
			}
			budget -= len(blocks)
		}
		s = next
	}
}

// creditSlot credits blocks, s's next ones in order, and unlinks s once it
// can take no more. Under w.mu.
func (w *WorkerLoad) creditSlot(s *Slot, blocks []radix.Block) {
	s.credit(blocks)
	if s.prefill.Load() == 0 {
		s.dropCredit()
		w.credit.remove(s)
	} else if s.cursor >= len(s.hashes) || s.credited.Load() >= s.prefill.Load() {
		w.credit.remove(s)
	}
}

// isBlock reports whether local is the local hash of the slot's block k:
// the sequence hash chain of the prompt, seq[0] = local[0] and seq[k] =
// radix.SeqHash(seq[k-1], local[k]).
func (s *Slot) isBlock(k int, local uint64) bool {
	if k == 0 {
		return s.hashes[0] == local
	}
	return radix.SeqHash(s.hashes[k-1], local) == s.hashes[k]
}

// credit takes blocks, the slot's next ones in order, as computed: A_c
// grows by their tokens and A_pairs shrinks by their attention work, up to
// the slot's booked prefill. Under w.mu.
func (s *Slot) credit(blocks []radix.Block) {
	n := min(len(blocks), len(s.hashes)-s.cursor)
	s.cursor += n
	s.lastStored, s.resumed = blocks[n-1].Hash, true
	k := s.credited.Load()
	a := min(int64(n)*s.bs, s.prefill.Load()-k)
	if a <= 0 {
		return
	}
	s.credited.Add(a)
	s.w.c.computed.Add(a)
	d := min(s.pairs.Load(), attentionPairs(s.start+k, a))
	s.pairs.Add(-d)
	s.w.c.pairs.Add(-d)
	// A completion racing this credit swapped prefill to 0 before
	// taking credited and pairs: whichever of the two swaps last finds
	// the other's part, so nothing stays counted.
	if s.prefill.Load() == 0 {
		s.dropCredit()
	}
}

// dropCredit takes the slot's credit out of A_c and its pairs out of
// A_pairs, once.
func (s *Slot) dropCredit() {
	if c := s.credited.Swap(0); c != 0 {
		s.w.c.computed.Add(-c)
	}
	if d := s.pairs.Swap(0); d != 0 {
		s.w.c.pairs.Add(-d)
	}
}

// MaxPrefillPairs bounds a worker rank's A_pairs and a booking's pairs:
// both saturate there, as A_p does at MaxActivePrefillTokens.
const MaxPrefillPairs = 1 << 60

// attentionPairs is the attention work of computing n prompt tokens after
// c already computed: token t attends to every position up to its own,
// Σ_{t=c+1}^{c+n} t = n·c + n·(n+1)/2 (query, key) pairs, saturating at
// MaxPrefillPairs. In float64: exact below 2^53, which real prompts stay
// far below.
func attentionPairs(c, n int64) int64 {
	if n <= 0 {
		return 0
	}
	fn := float64(n)
	f := fn*float64(max(0, c)) + fn*(fn+1)/2
	if !(f < MaxPrefillPairs) {
		return MaxPrefillPairs
	}
	return int64(f)
}
