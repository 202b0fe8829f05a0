package radix

import (
	"strings"
	"testing"
)

// checkIndex runs every check of invariants.go on ix: each shard's tree,
// lower tiers and counts.
func checkIndex(ix *Index) error {
	for _, s := range ix.shards {
		s.mu.Lock()
		err := checkTree(s.tree)
		if err == nil {
			err = s.checkLocked(true)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// corruptible builds a one-shard index of two workers sharing a split
// edge, a third with a chain of its own, and a host-tier block, so that
// every kind of state the checks cover exists.
func corruptible(t *testing.T) (*Index, *shard) {
	t.Helper()
	ix, _ := New(Config{Shards: 1})
	w1, w2, w3 := WorkerKey{WorkerID: 1}, WorkerKey{WorkerID: 2}, WorkerKey{WorkerID: 3}
	for _, ev := range []*Event{
		chainStore(w1, TierDevice, 0, 100, 1000, 6),
		chainStore(w2, TierDevice, 0, 100, 1000, 3),
		chainStore(w2, TierDevice, 102, 200, 2000, 2),
		chainStore(w3, TierDevice, 0, 300, 3000, 4),
		chainStore(w1, TierHostPinned, 105, 400, 1006, 2),
	} {
		if !ix.Apply(ev) {
			t.Fatalf("store %+v refused", ev)
		}
	}
	if err := checkIndex(ix); err != nil {
		t.Fatalf("the intact index fails its check: %v", err)
	}
	return ix, ix.shards[0]
}

// sharedNode returns the node holding w1's and w2's shared prefix, whose
// children are w1's tail and w2's own blocks.
func sharedNode(t *testing.T, s *shard) *node {
	t.Helper()
	n := s.tree.root.state.Load().children.get(1000)
	if n == nil || n.state.Load().children.len() != 2 {
		t.Fatal("no shared node with two children")
	}
	return n
}

// corruptions each break one invariant of an index from corruptible and
// name a word of the error the checks must return.
var corruptions = []struct {
	name, want string
	corrupt    func(t *testing.T, s *shard)
}{
	{"stale parent pointer", "parent pointer", func(t *testing.T, s *shard) {
		n := sharedNode(t, s)
		n.state.Load().children.each(func(_ uint64, c *node) {
			if c != n.moved { // that one's link fails first
				c.parent = &s.tree.root
			}
		})
	}},
	{"owner past its edge", "covers", func(t *testing.T, s *shard) {
		st := sharedNode(t, s).state.Load()
		st.owners[0].ext = append(st.owners[0].ext[:len(st.owners[0].ext):len(st.owners[0].ext)], 1)
	}},
	{"block counter", "block counter", func(t *testing.T, s *shard) { s.tree.blocks++ }},
	{"lost lookup entry", "lookup", func(t *testing.T, s *shard) {
		m := &s.tree.workers[WorkerKey{WorkerID: 3}].lookup
		for i := range m.n {
			if m.at(i) != 0 {
				m.deleteAt(i)
				break
			}
		}
	}},
	{"unregistered node", "node id", func(t *testing.T, s *shard) {
		n := sharedNode(t, s)
		s.tree.nodes[n.id] = nil
	}},
	{"moved link", "moved", func(t *testing.T, s *shard) {
		n := sharedNode(t, s)
		n.moved.parent = nil
	}},
	{"child key", "child keyed", func(t *testing.T, s *shard) {
		st := s.tree.root.state.Load()
		st.children.keys[0]++
	}},
	{"lower tier reverse map", "lower", func(t *testing.T, s *shard) {
		for _, mine := range s.lower[TierHostPinned].byWorker {
			for h := range mine {
				delete(mine, h)
				break
			}
		}
	}},
	{"held count", "held", func(t *testing.T, s *shard) { s.held[WorkerKey{WorkerID: 2}]++ }},
}

// TestChecksCatchCorruption: every corruption makes checkIndex fail with
// its error (in every build: tests call the checks directly).
func TestChecksCatchCorruption(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			ix, s := corruptible(t)
			c.corrupt(t, s)
			err := checkIndex(ix)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkIndex after the corruption: %v, want an error naming %q", err, c.want)
			}
		})
	}
}

// TestCheckBudget: the invariants build checks a structure of up to
// checkBudget blocks after every mutation and a bigger one after one
// mutation in size/checkBudget.
func TestCheckBudget(t *testing.T) {
	for _, c := range []struct {
		size  int64
		every int
	}{{0, 1}, {checkBudget, 1}, {2*checkBudget - 1, 1}, {2 * checkBudget, 2}, {10*checkBudget + 5, 10}} {
		var n uint64
		checked := 0
		for range 100 * c.every {
			if due(&n, c.size) {
				checked++
			}
		}
		if checked != 100 {
			t.Errorf("size %d: %d checks in %d mutations, want 100", c.size, checked, 100*c.every)
		}
	}
}
