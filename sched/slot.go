package sched

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/kvselect/kvselect/radix"
)

// Slot is the load one live request holds on one worker rank: its booked
// prefill (A_p), its prompt path in the worker's prompt trie (or its private
// blocks, without KV reuse) and its output blocks (A_d), and one unit of N.
//
// The host owns the request: it embeds a Slot in its own record of the
// request (so that a lifecycle call is one lookup of that record plus the
// Slot's updates), and drives it in this order:
//
//  1. Book, once, on the worker rank the request was placed on.
//  2. Any number of CompletePrefill and OutputBlock calls, from any
//     goroutine.
//  3. Release, once the request is done (free, expiry, worker removal).
//     Release is idempotent; after it CompletePrefill and OutputBlock
//     change nothing.
//
// Calling Book twice, or any other method before Book, is a broken caller
// protocol and panics. The zero Slot is unbooked. A Slot must not be copied
// after Book.
type Slot struct {
	// w is the worker rank; written by Book before it returns, immutable
	// after (the host publishes the Slot only after Book returns).
	w *WorkerLoad
	// prefill is the part of the booked prefill still counted in w's A_p
	// (what addPrefill added, less than Booking.PrefillTokens when A_p
	// saturated); swapped to 0 exactly once, by CompletePrefill or Release.
	prefill atomic.Int64
	// credited is the part of prefill the worker's KV events show
	// computed (progress.go): in [0, prefill] once no call is in flight,
	// counted in w's A_c.
	credited atomic.Int64
	// pairs is the attention work of the prefill not yet credited
	// (attentionPairs from start+credited), counted in w's A_pairs.
	pairs atomic.Int64
	// bs is Booking.BlockSize; immutable after Book.
	bs int64
	// start is the prompt position the booked prefill starts at (the
	// cached prefix); immutable after Book.
	start int64

	// Under w.mu:
	// hashes is the slot's own copy of its sequence hashes from block
	// hashesAt on (the trie's new nodes alias it; never written). The
	// hashes before hashesAt are equal, one by one, to the edges of the
	// trie nodes on term's path (Book checked), so they are not copied:
	// AppendHashes reads them there.
	hashes        []uint64
	hashesAt      int
	term          *pnode // terminal node in w.trie; nil when not in the trie
	private       int64  // blocks counted outside the trie (no KV reuse)
	privateWeight int64  // fixed-point weight of each private block
	outputs       int64  // output blocks added
	outputFixed   int64  // fixed-point total weight of the output blocks
	released      bool   // Release ran: counted in no counter any more
	next, prev    *Slot  // w.credit's links (progress.go)
	queued        bool   // in w.credit
	cursor        int    // the block the next computed block must be (progress.go)
}

// Booking is the input of Slot.Book.
type Booking struct {
	// SequenceHashes are the request's tracking hashes (full blocks). Book
	// copies them; the caller may reuse the slice.
	SequenceHashes []uint64
	// PrefillTokens is the effective prefill to book (EffectivePrefillTokens
	// of the selected worker). 0 books none; pass 0 when
	// track_prefill_tokens is off. A_p saturates at MaxActivePrefillTokens.
	PrefillTokens int64
	// AssumeKVReuse is the request's resolved assume_kv_reuse: false counts
	// every block as the request's own (no prefix sharing).
	AssumeKVReuse bool
	// BlockSize is the partition's block size in tokens: the booked
	// prefill is taken to end at len(SequenceHashes)·BlockSize, which
	// places it in the prompt for its attention work (A_pairs) and gives
	// the block its KV events are expected from (progress.go). 0 counts it
	// from position 0 and credits it nothing (the host passes 0 when the
	// sequence hashes are not the public tracking chain).
	BlockSize int64
}

// Book records the request on worker rank w (Dynamo's add_request,
// ai-dynamo/dynamo:lib/kv-router/src/sequences/single.rs): A_p +=
// PrefillTokens (saturating at MaxActivePrefillTokens), the prompt path
// joins the worker's prompt set (blocks shared with live requests on that
// worker are not counted again), N += 1; R += PrefillTokens (saturating
// at MaxRoutedPrefillTokens; never taken back: R is the demand routed
// here, not a live load).
//
// Errors: ErrWorkerNotFound when w is retired (booking never revives a
// worker); the Slot is then unbooked and may be dropped.
func (s *Slot) Book(w *WorkerLoad, b *Booking) error {
	if s.w != nil {
		panic("BUG: sched: Slot booked twice")
	}
	reuse := b.AssumeKVReuse && w.trackBlocks
	seq := b.SequenceHashes
	// The copy the slot keeps (and its new trie nodes retain): from where
	// seq leaves the worker's live prompts (the lock-free walk, before the
	// lock; acquire copies more if a release raced it), or, when it may
	// take prefill credit (progress.go), from the block before its cached
	// prefix, if that is first (Book's cached prefix below is at least
	// cachedBlocks of PrefillTokens, as what addPrefill adds is at most
	// that). Copying a whole prompt of hashes was most of Book's time in
	// kvselect bench's C1024 profile, where a request shares most of its
	// prefix with live ones.
	var own []uint64
	at := 0
	if reuse && len(seq) > 0 {
		at = w.trie.sharedDepth(seq)
		if b.PrefillTokens > 0 && b.BlockSize > 0 {
			at = min(at, max(0, cachedBlocks(len(seq), b.BlockSize, b.PrefillTokens)-1))
		}
		own = slices.Clone(seq[at:])
	}
	w.mu.Lock()
	if w.retired.Load() {
		w.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrWorkerNotFound, w.key)
	}
	s.w = w
	if b.PrefillTokens > 0 {
		addSaturating(&w.c.routed, b.PrefillTokens, MaxRoutedPrefillTokens)
		if p := w.c.addPrefill(b.PrefillTokens); p > 0 {
			s.prefill.Store(p)
			if bs := b.BlockSize; bs > 0 {
				cb := cachedBlocks(len(seq), bs, p)
				s.start, s.bs, s.cursor = int64(cb)*bs, bs, cb
				if reuse && s.cursor < len(seq) {
					w.credit.push(s)
				}
			}
			s.pairs.Store(addSaturating(&w.c.pairs, attentionPairs(s.start, p), MaxPrefillPairs))
		}
	}
	var delta int64
	if w.trackBlocks {
		if reuse {
			var exact bool
			s.term, delta, s.hashes, s.hashesAt, exact = w.trie.acquire(seq, own, at)
			if !exact { // hashes that are no chain: keep them all
				s.hashes, s.hashesAt = slices.Clone(seq), 0
			}
		} else {
			s.private = int64(len(b.SequenceHashes))
			s.privateWeight = fullWeight
			delta = s.private * fullWeight
		}
	}
	if invariants {
		w.trie.check()
	}
	w.c.blocksFixed.Add(delta)
	w.c.requests.Add(1)
	w.mu.Unlock()
	return nil
}

// Worker returns the worker rank the slot is booked on (the zero key before
// Book).
func (s *Slot) Worker() radix.WorkerKey {
	if s.w == nil {
		return radix.WorkerKey{}
	}
	return s.w.key
}

// Prefill returns the prefill the slot still counts in A_p: 0 once
// completed or released.
func (s *Slot) Prefill() int64 { return s.prefill.Load() }

// AppendHashes appends the slot's tracking hashes to dst, as Book was
// given them when it joined the worker's prompt trie: the trie's edges on
// its path up to hashesAt, then its own copy. None without KV reuse or
// once released.
func (s *Slot) AppendHashes(dst []uint64) []uint64 {
	s.mustBeBooked()
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.term == nil {
		return dst
	}
	base, at := len(dst), s.hashesAt
	dst = slices.Grow(dst, at+len(s.hashes))[:base+at]
	for n := s.term; n.parent != nil; n = n.parent {
		end := n.chainAt + len(n.chain)
		if start := end - len(n.hashes); start < at {
			copy(dst[base+start:base+min(end, at)], n.hashes)
		}
	}
	return append(dst, s.hashes...)
}

// cachedBlocks is the cached prefix, in blocks, of a prompt of n full
// blocks of bs tokens (and a partial one of fewer) with p tokens of
// prefill booked: p = isl − cached, so it ends at block
// ceil((n·bs − p)/bs), within [0, n]. The smaller p, the longer.
func cachedBlocks(n int, bs, p int64) int {
	return int(min(int64(n), max(0, (int64(n)*bs-p+bs-1)/bs)))
}

// Retired reports whether the slot's worker rank was retired (false before
// Book).
func (s *Slot) Retired() bool { return s.w != nil && s.w.Retired() }

// CompletePrefill clears the slot's booked prefill from A_p and its
// credit from A_c (Dynamo's mark_prefill_completed). Idempotent; atomic
// swaps, no lock. Release swaps the same fields, so a completion
// racing a release subtracts nothing twice.
func (s *Slot) CompletePrefill() {
	s.mustBeBooked()
	s.clearPrefill()
}

// clearPrefill takes the slot's prefill out of A_p, then its credit out
// of A_c (in that order: Slot.credit relies on it). The slot may stay in the
// credit queue; CreditStored or Release unlinks it.
func (s *Slot) clearPrefill() {
	if p := s.prefill.Swap(0); p != 0 {
		s.w.c.prefillTokens.Add(-p)
	}
	s.dropCredit()
}

// OutputBlock records one output block of the request (Dynamo's
// add_output_block): one more decode block of weight 1. With decayFraction
// f (in [0, 1]), every output block of the request and every prompt block
// only this request holds on its worker get weight f instead, as Dynamo's
// block tracker weighs them. A no-op once the slot is released.
//
// Errors: ErrInvalidDecayFraction (f outside [0, 1] or NaN).
func (s *Slot) OutputBlock(decayFraction *float64) error {
	wf, err := decayWeight(decayFraction)
	if err != nil {
		return err
	}
	s.mustBeBooked()
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.released {
		return nil
	}
	old := s.outputFixed
	s.outputs++
	if decayFraction == nil {
		s.outputFixed += fullWeight
	} else {
		s.outputFixed = s.outputs * wf
	}
	delta := s.outputFixed - old
	if decayFraction != nil {
		delta += w.trie.setExclusiveWeight(s.term, wf)
		delta += s.private * (wf - s.privateWeight)
		s.privateWeight = wf
		if invariants {
			w.trie.check()
		}
	}
	w.c.blocksFixed.Add(delta)
	return nil
}

// decayWeight validates a decay_fraction (nil: none) and returns it in
// fixed point.
func decayWeight(decayFraction *float64) (int64, error) {
	if decayFraction == nil {
		return 0, nil
	}
	f := *decayFraction
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("%w: got %v", ErrInvalidDecayFraction, f)
	}
	return toFixed(f), nil
}

// Release takes the request out of its worker's counters and trie (Dynamo's
// free): its prefill, the prompt blocks no other slot holds, its output
// blocks and its unit of N. It reports whether this call released it: true
// exactly once per booked slot.
func (s *Slot) Release() bool {
	s.mustBeBooked()
	w := s.w
	s.clearPrefill()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.credit.remove(s)
	if s.released {
		return false
	}
	delta := -(s.outputFixed + s.private*s.privateWeight)
	if s.term != nil {
		delta += w.trie.release(s.term)
		if invariants {
			w.trie.check()
		}
	}
	w.c.blocksFixed.Add(delta)
	w.c.requests.Add(-1)
	s.released = true
	s.term, s.hashes, s.hashesAt = nil, nil, 0
	return true
}

func (s *Slot) mustBeBooked() {
	if s.w == nil {
		panic("BUG: sched: Slot used before Book")
	}
}
