package radix

import (
	"math/rand/v2"
	"testing"
)

// TestExtMapAgainstMap checks the table against Go's map over random
// operations on a small key space (dense collisions) and a wide one.
func TestExtMapAgainstMap(t *testing.T) {
	nodes := []*node{{}, {}, {}}
	for _, space := range []uint64{64, 1 << 40} {
		r := rand.New(rand.NewPCG(space, 3))
		var m extMap
		want := map[uint64]ref{}
		for step := range 200000 {
			k := r.Uint64N(space)
			if space > 64 && r.IntN(2) == 0 {
				k = uint64(r.IntN(512)) << 20 // structured keys
			}
			switch r.IntN(3) {
			case 0, 1:
				v := ref{nodes[r.IntN(3)], uint32(r.IntN(100))}
				m.put(k, v)
				want[k] = v
			default:
				m.del(k)
				delete(want, k)
			}
			if m.Len() != len(want) {
				t.Fatalf("step %d: len %d, want %d", step, m.Len(), len(want))
			}
			if step%1000 == 0 {
				for k, v := range want {
					if got, ok := m.get(k); !ok || got != v {
						t.Fatalf("step %d: get(%d) = %v %v, want %v", step, k, got, ok, v)
					}
				}
				n := 0
				m.each(func(k uint64, r *ref) {
					n++
					if want[k] != *r {
						t.Fatalf("each: %d has %v, want %v", k, *r, want[k])
					}
				})
				if n != len(want) {
					t.Fatalf("each visited %d, want %d", n, len(want))
				}
			}
			if _, ok := m.get(k); ok != (func() bool { _, ok := want[k]; return ok }()) {
				t.Fatalf("step %d: presence of %d disagrees", step, k)
			}
		}
	}
}
