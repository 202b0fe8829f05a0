package peers

// slotTable maps uint64 keys to int32 slots: open addressing with linear
// probing and backward-shift deletion, sized once for at most n keys at a
// load of at most 1/2. It replaces a Go map under lru: AIBrix's table
// inserts and deletes about 10,000 keys per request, and with Go 1.26's
// swiss map the deletions' tombstones made probing 65% of the policy's
// time (BenchmarkAIBrixPick: 2.67 ms per pick with the map).
//
// Invariant: every key is reachable from its home bucket without crossing
// an empty bucket; key 0 marks an empty bucket (keys are remapped off 0).
type slotTable struct {
	keys []uint64
	vals []int32
	mask uint64
	n    int
}

func newSlotTable(n int) *slotTable {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	return &slotTable{keys: make([]uint64, size), vals: make([]int32, size), mask: uint64(size - 1)}
}

func fixKey(k uint64) uint64 {
	if k == 0 {
		return 1
	}
	return k
}

func (t *slotTable) home(k uint64) uint64 { return splitmix64(k) & t.mask }

func (t *slotTable) get(k uint64) (int32, bool) {
	k = fixKey(k)
	for i := t.home(k); ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// slotFor returns the value of k, inserting k with value 0 if absent (a
// caller storing 0 must not: 0 reads as absent to get's callers here,
// lru's slots start at 1). Precondition: fewer than the sized n keys.
func (t *slotTable) slotFor(k uint64) *int32 {
	k = fixKey(k)
	for i := t.home(k); ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			return &t.vals[i]
		case 0:
			if 2*(t.n+1) > len(t.keys) {
				panic("BUG: peers: slot table over its size")
			}
			t.keys[i], t.vals[i] = k, 0
			t.n++
			return &t.vals[i]
		}
	}
}

// set inserts or updates k. Precondition: fewer than the sized n keys.
func (t *slotTable) set(k uint64, v int32) {
	k = fixKey(k)
	for i := t.home(k); ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			t.vals[i] = v
			return
		case 0:
			if 2*(t.n+1) > len(t.keys) {
				panic("BUG: peers: slot table over its size")
			}
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		}
	}
}

func (t *slotTable) del(k uint64) {
	k = fixKey(k)
	i := t.home(k)
	for ; t.keys[i] != k; i = (i + 1) & t.mask {
		if t.keys[i] == 0 {
			return
		}
	}
	t.n--
	// Backward shift: move later keys of the probe run into the hole when
	// the hole lies between their home and their bucket.
	for j := (i + 1) & t.mask; t.keys[j] != 0; j = (j + 1) & t.mask {
		h := t.home(t.keys[j])
		if (j-h)&t.mask >= (j-i)&t.mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i] = 0
}
