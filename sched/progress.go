package sched

import "github.com/kvselect/kvselect/radix"

// Prefill progress (A_c). A_p counts a booked prompt in full until its
// first token (prefill_complete), however far its prefill has gone. The
// worker's own KV events say how far: an engine publishes BlockStored for
// the blocks each step computes, chunk by chunk through a chunked prefill
// (vLLM v1 caches a request's full blocks in the step that schedules them,
// vllm-project/vllm:vllm/v1/core/kv_cache_manager.py allocate_slots, and
// its block pool queues one BlockStored per newly cached run, with the
// parent's hash and the blocks' tokens: vllm/v1/core/block_pool.py
// cache_full_blocks).
// The host passes each such event to WorkerLoad.CreditStored, which finds
// the booking the blocks belong to and credits their tokens to it, and
// A_p − A_c is the prefill really left ahead of a new request.
//
// A booking is recognised by its own sequence hashes, which must be the
// public tracking chain (seq[0] = local[0], seq[k] = radix.SeqHash(seq[k-1],
// local[k])): an event continues a booking when its first block is the
// booking's next one (the block after its cached prefix, or after the
// blocks already credited), i.e. seq[k] = SeqHash(seq[k-1], Local); the
// oldest such booking takes it. The check is of the block's content
// against the booking's own chain, not of the event's prefix: a chunk of
// another prompt that starts with the same tokens as a booking's next
// block would be credited to it (at most that chunk, and only until the
// booking completes). Blocks of anything else (output blocks, requests
// booked elsewhere, sync or warm-up blocks) match no booking and credit
// nothing. Invariants:
//
//   - 0 <= s.credited <= the prefill s booked, and s.pairs >= 0, once no
//     call is in flight; a slot gets no credit once its prefill is
//     completed or released, and what it had leaves A_c with it
//     (clearPrefill).
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
//
// Crediting needs the booking's sequence hashes (kept when blocks are
// tracked and KV reuse is assumed), a block size, and the public chain
// (the host books with BlockSize 0 under keyed tracking hashes). A booking
// whose next block the engine found cached (a prefix cached after the
// booking's overlap was read) never matches; it stays queued, at the cost
// of hashes within the budget, until it completes.

// maxCreditScan bounds the radix.SeqHash calls of one CreditStored (about
// 8 µs of hashing).
const maxCreditScan = 2048

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
// this worker rank to the pending booking they belong to, oldest booking
// first; a booking gets at most its booked prefill. Blocks that belong to
// no pending booking credit nothing. It returns the tokens credited.
// Allocation-free; takes w.mu.
func (w *WorkerLoad) CreditStored(blocks []radix.Block) int64 {
	if len(blocks) == 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	budget := maxCreditScan
	// The event starts at a booking's next block: the next chunk of a
	// prefill, or its first. A first chunk may also start one block
	// later: a prompt whose last full block is not hashed (eagle) makes
	// the booking's cached prefix one block longer than Book derives.
	for s := w.credit.head; s != nil && budget > 0; {
		next := s.next
		if s.prefill.Load() == 0 {
			// Completed or released: unlink (Release would too).
			s.dropCredit()
			w.credit.remove(s)
			s = next
			continue
		}
		budget -= 2
		if s.isBlock(s.cursor, blocks[0].Local) {
			return w.creditSlot(s, blocks)
		}
		if s.credited.Load() == 0 && s.cursor+1 < s.blocks() && s.isBlock(s.cursor+1, blocks[0].Local) {
			s.cursor++
			return w.creditSlot(s, blocks)
		}
		s = next
	}
	// The event starts before a booking's next block: its engine found
	// less of the prefix cached than the booking's overlap (evicted
	// meanwhile) and recomputes it; only the booked blocks count.
	for s := w.credit.head; s != nil && budget > 0; s = s.next {
		if s.prefill.Load() == 0 {
			continue
		}
		for j := 1; j < len(blocks) && budget > 0; j++ {
			budget--
			if s.isBlock(s.cursor, blocks[j].Local) {
				return w.creditSlot(s, blocks[j:])
			}
		}
	}
	return 0
}

// creditSlot credits blocks, s's next ones in order, unlinks s once it can
// take no more, and returns the tokens credited. Under w.mu.
func (w *WorkerLoad) creditSlot(s *Slot, blocks []radix.Block) int64 {
	a := s.credit(blocks)
	// Completed meanwhile (credit dropped what it added), fully computed
	// or fully credited: no more credit.
	if p := s.prefill.Load(); p == 0 || s.cursor >= s.blocks() || s.credited.Load() >= p {
		w.credit.remove(s)
	}
	return a
}

// isBlock reports whether local is the local hash of the slot's block k:
// the sequence hash chain of the prompt, seq[0] = local[0] and seq[k] =
// radix.SeqHash(seq[k-1], local[k]).
func (s *Slot) isBlock(k int, local uint64) bool {
	if k == 0 {
		return s.hash(0) == local
	}
	return radix.SeqHash(s.hash(k-1), local) == s.hash(k)
}

// blocks is the number of the slot's sequence hashes.
func (s *Slot) blocks() int { return s.hashesAt + len(s.hashes) }

// hash is the slot's sequence hash of block k, for k at least one block
// before its cursor's start (Book keeps its own copy from there on).
func (s *Slot) hash(k int) uint64 { return s.hashes[k-s.hashesAt] }

// credit takes blocks, the slot's next ones in order, as computed: A_c
// grows by their tokens and A_pairs shrinks by their attention work, up to
// the slot's booked prefill. It returns the tokens credited. Under w.mu.
func (s *Slot) credit(blocks []radix.Block) int64 {
	n := min(len(blocks), s.blocks()-s.cursor)
	s.cursor += n
	k := s.credited.Load()
	a := min(int64(n)*s.bs, s.prefill.Load()-k)
	if a <= 0 {
		return 0
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
	return a
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
