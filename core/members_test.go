package core

import "testing"

// TestMemberRanksFollowChanges: the members' rank count (the listener
// limit's input) equals the sum of their ranks through re-registrations
// that grow and shrink a worker's ranks, moves between partitions,
// incomplete records and deletions.
func TestMemberRanksFollowChanges(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(4)
	up := func(id uint64, group string, dp uint32, kv bool) {
		t.Helper()
		f := WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}
		if kv {
			f.KVEventsEndpoints = map[uint32]string{}
			for r := range dp {
				f.KVEventsEndpoints[r] = "tcp://127.0.0.1:1"
			}
		}
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, RoutingGroup: group, WorkerFields: f}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want int) {
		t.Helper()
		sum := 0
		for _, p := range *s.parts.Load() {
			p.m.mu.Lock()
			n := 0
			for _, m := range p.m.workers {
				n += int(m.rankSize)
			}
			if n != p.m.ranks {
				t.Errorf("partition %s: ranks %d, members hold %d", p.group, p.m.ranks, n)
			}
			p.m.mu.Unlock()
			sum += n
		}
		if got := s.Stats().Listeners; got != want || sum != want {
			t.Fatalf("listeners %d (members %d), want %d", got, sum, want)
		}
	}
	up(1, "a", 2, true)
	up(2, "a", 3, true)
	check(5)
	up(1, "a", 4, true) // grows in place
	check(7)
	up(1, "a", 1, true) // shrinks
	check(4)
	up(2, "b", 3, true) // moves
	check(4)
	up(2, "b", 3, false) // incomplete: no kv_events endpoints
	check(1)
	if _, err := s.DeleteWorker(1); err != nil {
		t.Fatal(err)
	}
	check(0)
}
