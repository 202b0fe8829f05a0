package core

import (
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// progressReq is a hash-form request of n blocks of 16 tokens whose local
// hashes start at base, pinned to worker pin when pin > 0.
func progressReq(base uint64, n int, pin uint64) (SelectRequest, []uint64) {
	var r SelectRequest
	for i := range n {
		r.BlockHashes = append(r.BlockHashes, base+uint64(i))
	}
	r.SequenceHashes = radix.SequenceHashes(nil, r.BlockHashes)
	r.HasBlockHashes, r.HasSequenceHashes = true, true
	r.ISLTokens, r.HasISLTokens = uint64(16*n), true
	if pin > 0 {
		r.PinnedWorker = &radix.WorkerKey{WorkerID: pin}
	}
	return r, r.BlockHashes
}

// TestKVEventsCreditBookedPrefill: the blocks a worker's KV events report
// stored are credited to the booking they compute, through the
// partition's event sink, and cache_balance then sees the prefill left
// instead of the prefill booked. Worker 1 holds a booked 1,024-token
// prefill, worker 2 a 512-token one: before worker 1's events,
// cache_balance sends a new request to worker 2; once they show worker
// 1's prefill computed, to worker 1. The reference's policy reads A_p only
// and keeps worker 2.
func TestKVEventsCreditBookedPrefill(t *testing.T) {
	s := oneWorkerService(t, DefaultConfig(), Options{})
	ep, bs := "http://w2", uint32(16)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 2, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	var sel Selection
	a, aLocal := progressReq(1000, 64, 1)
	if err := s.SelectAndReserve(&a, &sel); err != nil || sel.WorkerID != 1 || sel.EffectivePrefillTokens != 1024 {
		t.Fatalf("booking a: %v, %+v", err, sel)
	}
	b, _ := progressReq(2000, 32, 2)
	if err := s.SelectAndReserve(&b, &sel); err != nil || sel.WorkerID != 2 {
		t.Fatalf("booking b: %v, %+v", err, sel)
	}
	pick := func(policy string) uint64 {
		t.Helper()
		c, _ := progressReq(3000, 8, 0)
		c.Override = &sched.Override{RoutingPolicy: policy}
		if err := s.Select(&c, &sel); err != nil {
			t.Fatal(err)
		}
		return sel.WorkerID
	}
	if w := pick(sched.SelectionCacheBalance); w != 2 {
		t.Fatalf("cache_balance before worker 1's events picked %d, want 2 (512 tokens ahead, not 1,024)", w)
	}

	// Worker 1's engine stores a's blocks in two chunks, and an output
	// block of some other request.
	sink := s.EventSink(DefaultPartition, DefaultPartition)
	chunk := func(from, to int) radix.Event {
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored}
		for i := from; i < to; i++ {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(9000 + i), Local: aLocal[i]})
		}
		if from > 0 {
			ev.ParentHash, ev.HasParent = uint64(9000+from-1), true
		}
		return ev
	}
	hostTier := chunk(0, 64)
	hostTier.Tier = radix.TierHostPinned
	sink.ApplyBatch([]radix.Event{hostTier}) // offloaded blocks are not computed prefill
	if st := s.Stats(); st.PrefillCreditTokens != 0 || st.StoredEventsCredited+st.StoredEventsUncredited != 0 {
		t.Fatalf("a host-tier event counted: %+v", st)
	}
	sink.ApplyBatch([]radix.Event{chunk(0, 16), {Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 1, Local: 77}}}})
	if st := s.Stats(); st.PrefillCreditTokens != 256 {
		t.Fatalf("credited %d tokens after the first chunk, want 256", st.PrefillCreditTokens)
	}
	if w := pick(sched.SelectionCacheBalance); w != 2 {
		t.Fatalf("cache_balance with 768 of worker 1's tokens left picked %d, want 2", w)
	}
	sink.ApplyBatch([]radix.Event{chunk(16, 64)})
	if w := pick(sched.SelectionCacheBalance); w != 1 {
		t.Fatalf("cache_balance with worker 1's prefill computed picked %d, want 1", w)
	}
	if w := pick(sched.SelectionDefault); w != 2 {
		t.Fatalf("the reference's policy picked %d, want 2 (it reads the booked prefill only)", w)
	}
	st := s.Stats()
	if st.PrefillCreditTokens != 1024 || st.StoredEventsCredited != 2 || st.StoredEventsUncredited != 1 {
		t.Fatalf("credit stats: %d tokens, %d events credited, %d not; want 1024, 2, 1", st.PrefillCreditTokens, st.StoredEventsCredited, st.StoredEventsUncredited)
	}
}

// TestKeyedTrackingBooksWithoutCredit: under keyed tracking hashes the
// bookings' sequence hashes are not the public chain the KV events can be
// matched to, so nothing is credited (and nothing queued for it).
func TestKeyedTrackingBooksWithoutCredit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tracking = TrackingHash{Keyed: true, Key: make([]byte, TrackingKeySize), KeyID: "k"}
	s := oneWorkerService(t, cfg, Options{})
	var sel Selection
	req := SelectRequest{Prompt: Prompt{TokenIDs: iota32(16 * 8), HasTokenIDs: true}}
	if err := s.SelectAndReserve(&req, &sel); err != nil {
		t.Fatal(err)
	}
	local := radix.LocalHashes(nil, iota32(16*8), 16, radix.HashSeed("", ""))
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored}
	for i, h := range local {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(500 + i), Local: h})
	}
	s.EventSink(DefaultPartition, DefaultPartition).ApplyBatch([]radix.Event{ev})
	if st := s.Stats(); st.PrefillCreditTokens != 0 || st.StoredEventsUncredited != 1 {
		t.Fatalf("keyed tracking: %d tokens credited, %d events uncredited; want 0, 1", st.PrefillCreditTokens, st.StoredEventsUncredited)
	}
}
