package sched

import (
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
)

// kidNode is a child whose edge starts with h (what a reader checks).
func kidNode(h uint64) *pnode { return &pnode{chain: []uint64{h}, hashes: []uint64{h}} }

// checkKids compares n's children with want: every key's child, the
// count and the range, plus absent keys.
func checkKids(t *testing.T, n *pnode, want map[uint64]*pnode, absent []uint64) {
	t.Helper()
	for h, c := range want {
		if got := n.child(h); got != c {
			t.Fatalf("child(%d) = %p, want %p", h, got, c)
		}
	}
	for _, h := range absent {
		if _, ok := want[h]; !ok && n.child(h) != nil {
			t.Fatalf("child(%d) present after its delete", h)
		}
	}
	if got := n.numChildren(); got != len(want) {
		t.Fatalf("numChildren = %d, want %d", got, len(want))
	}
	seen := 0
	n.rangeChildren(func(h uint64, c *pnode) {
		if want[h] != c {
			t.Fatalf("rangeChildren: %d -> %p, want %p", h, c, want[h])
		}
		seen++
	})
	if seen != len(want) {
		t.Fatalf("rangeChildren saw %d, want %d", seen, len(want))
	}
}

// TestKidTableMatchesMap drives a node's child set through adds,
// replacements and deletes of 300 keys (so that deleted slots are reused
// and tables rebuilt, growing and shrinking) and compares it with a map
// after every change.
func TestKidTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var n pnode
	want := map[uint64]*pnode{}
	keys := make([]uint64, 300)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	keys[0] = 0 // a hash of 0 is a key like any other
	for op := range 20000 {
		// Phases: grow to all keys, shrink to a few, grow again.
		span := len(keys)
		if op/5000%2 == 1 {
			span = 12
		}
		h := keys[rng.IntN(span)]
		switch rng.IntN(3) {
		case 0, 1:
			c := kidNode(h)
			n.setChild(h, c)
			want[h] = c
		default:
			n.deleteChild(h)
			delete(want, h)
		}
		if op%7 == 0 || len(want) < 20 {
			checkKids(t, &n, want, keys)
		}
	}
	// Deleting everything leaves an empty table, not a small set.
	for h := range want {
		n.deleteChild(h)
	}
	checkKids(t, &n, nil, keys)
}

// TestKidTableCollisions: keys that all start in one slot (the seed made
// 1, the keys' top bits equal) probe past each other and wrap around the
// table, deleted slots included.
func TestKidTableCollisions(t *testing.T) {
	tb := newKidTable(8)
	tb.seed = 1
	n := len(tb.slots)
	start := uint64(n-3) << tb.shift // the third-last slot, so probes wrap
	var keys []uint64
	for i := range n/2 - 1 {
		keys = append(keys, start+uint64(i))
	}
	want := map[uint64]*pnode{}
	for _, h := range keys {
		c := kidNode(h)
		if !tb.put(h, c) {
			t.Fatalf("put %d refused below half full", h)
		}
		want[h] = c
	}
	if tb.put(start+uint64(len(keys)), kidNode(0)) {
		t.Fatal("put accepted a key past half full")
	}
	for i, h := range keys {
		if i%3 == 0 {
			tb.del(h)
			delete(want, h)
		}
	}
	for _, h := range keys {
		if got := tb.get(h); got != want[h] {
			t.Fatalf("get(%d) = %p, want %p", h, got, want[h])
		}
	}
	// A deleted key comes back into its own slot; the rebuilt table
	// drops the tombstones.
	c := kidNode(keys[0])
	if !tb.put(keys[0], c) || tb.get(keys[0]) != c {
		t.Fatal("re-put of a deleted key")
	}
	want[keys[0]] = c
	nt := tb.rebuilt()
	if nt.used != len(want) || nt.live != len(want) {
		t.Fatalf("rebuilt: used %d live %d, want %d", nt.used, nt.live, len(want))
	}
	var got []uint64
	nt.each(func(h uint64, c *pnode) {
		if want[h] != c {
			t.Fatalf("rebuilt: %d -> %p", h, c)
		}
		got = append(got, h)
	})
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if len(got) != len(want) {
		t.Fatalf("rebuilt holds %d, want %d", len(got), len(want))
	}
}

// TestKidTableConcurrentReaders: readers probing a table that one writer
// grows, rebuilds and deletes from only ever find a child under its own
// key (run under -race for the memory model).
func TestKidTableConcurrentReaders(t *testing.T) {
	var n pnode
	keys := make([]uint64, 200)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	for _, h := range keys[:smallKids+1] {
		n.setChild(h, kidNode(h))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan uint64, 4)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(5, uint64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := keys[r.IntN(len(keys))]
				if c := n.child(h); c != nil && c.chain[0] != h {
					errs <- h
					return
				}
			}
		}()
	}
	for i := range 20000 {
		h := keys[rng.IntN(len(keys))]
		if i%3 == 0 {
			n.deleteChild(h)
		} else {
			n.setChild(h, kidNode(h))
		}
	}
	close(stop)
	wg.Wait()
	select {
	case h := <-errs:
		t.Fatalf("a reader found another key's child under %d", h)
	default:
	}
}
