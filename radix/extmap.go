package radix

import "slices"

// extMap is the per-worker lookup from external block hash to the block's
// place in the tree. It stores no keys: a slot holds 32 bits of the key's
// hash and the block's place, and the tree confirms a candidate by reading
// the worker's external hash at that place (Tree.locate), which the tree
// stores anyway for readers.
//
// Memory: a slot is 12 bytes (hash bits, node id, offset; no pointer, so
// the garbage collector does not scan the table either) where it was 24
// (key, *node, offset), and a table is 16/25 to 7/8 full (see resize)
// where it was 3/8 to 3/4: 14 to 18 bytes per entry, 15 on average over
// table sizes from 100 to 500 K entries, instead of 32 to 64. This is most
// of what took the index from 58-66 to 24-33 bytes per (worker, block)
// (BenchmarkMemory, see doc.go).
//
// Representation: an ordered linear-probing table. A key's home slot is
// its hash bits scaled to [0, size) (h*size >> 32, so size need not be a
// power of two); an entry sits at or after its home with no empty slot in
// between, and occupied slots hold nondecreasing hash bits along the whole
// array. So a lookup stops at the first larger hash bits (a miss costs
// about what a hit does, which is what keeps 7/8 full cheap), an insert
// shifts the run after its place right by one slot (one memmove), a delete
// shifts the displaced entries after it left, and a resize is one in-order
// pass that needs no keys. Entries near the end spill into a tail past
// size instead of wrapping around.
//
// Why not a Go map: the apply path does one lookup and one insert per
// stored block per worker, and with Go's map these were 45% of the apply
// profile (mapassign_fast64 36%, mapaccess2 11%; BenchmarkApplyStored,
// 2.6 M blocks/s).
type extMap struct {
	// slots holds the entries; len(slots) > size, the rest being the
	// spill tail, whose last slot is always empty.
	slots []extSlot
	size  uint64 // number of home slots
	count int
}

// extSlot is one entry: hash == 0 marks an empty slot, otherwise hash is
// hashBits(key) and (id, off) the block's place (see Tree.nodes).
type extSlot struct {
	hash    uint32
	id, off uint32
}

const (
	extMapMinSize = 8
	extMapMinTail = 8
)

// hashBits returns the 32 bits of k's hash that the table orders by; never
// 0. Keys are engine block hashes, already well mixed; the multiply spreads
// structured ones.
func hashBits(k uint64) uint32 { return uint32((k*0x9E3779B97F4A7C15)>>32) | 1 }

// home scales h to [0, size); size < 2^32, so the product fits.
func (m *extMap) home(h uint32) int { return int(uint64(h) * m.size >> 32) }

// Len returns the number of entries.
func (m *extMap) Len() int { return m.count }

// seek returns k's hash bits and the first slot from k's home that is
// empty or holds hash bits >= them: the entries whose bits equal k's are
// the run starting there. The caller confirms which of them, if any, is k.
func (m *extMap) seek(k uint64) (int, uint32) {
	h := hashBits(k)
	if m.size == 0 {
		return 0, h
	}
	i := m.home(h)
	for m.slots[i].hash != 0 && m.slots[i].hash < h {
		i++
	}
	return i, h
}

// insert adds an entry for k, which must not be present (the tree checks
// with seek first). It may move any entry.
func (m *extMap) insert(k uint64, id, off uint32) {
	if uint64(m.count+1)*8 > m.size*7 {
		m.resize(m.count + 1)
	}
	i, h := m.seek(k)
	for m.slots[i].hash == h {
		i++ // among equal bits, order does not matter
	}
	e := i
	for m.slots[e].hash != 0 {
		e++
	}
	if e == len(m.slots)-1 {
		m.growTail()
	}
	copy(m.slots[i+1:e+1], m.slots[i:e])
	m.slots[i] = extSlot{h, id, off}
	m.count++
}

// deleteAt removes the entry in slot i, shifting the displaced entries
// after it back by one, and shrinks a table left under 1/4 full (a worker
// that evicted most of its blocks). It may move any entry.
func (m *extMap) deleteAt(i int) {
	e := i + 1
	for m.slots[e].hash != 0 && m.home(m.slots[e].hash) < e {
		e++
	}
	copy(m.slots[i:e-1], m.slots[i+1:e])
	m.slots[e-1] = extSlot{}
	m.count--
	if m.size > extMapMinSize && uint64(m.count)*4 < m.size {
		m.resize(m.count)
	}
}

// resize rebuilds the table for n entries, in one pass in order, in the
// smallest allocation that leaves it at most 4/5 full: the allocator rounds
// the request up to its size class (up to 1/4 more, near 32 KiB) and the
// slack becomes home slots. So a table is between 16/25 and 4/5 full after
// a resize, and grows again past 7/8. Growing this often (every 10% more
// entries) costs little because a resize is a sequential copy: the build
// in BenchmarkMemory takes as long as with the doubling table before it.
func (m *extMap) resize(n int) {
	size := max(extMapMinSize, uint64(n)*5/4+1)
	old := m.slots
	m.alloc(int(size + tailFor(size)))
	m.size = max(size, uint64(len(m.slots))-tailFor(uint64(len(m.slots))))
	next := 0
	for _, s := range old {
		if s.hash == 0 {
			continue
		}
		i := max(m.home(s.hash), next)
		if i >= len(m.slots)-1 {
			m.growTail()
		}
		m.slots[i] = s
		next = i + 1
	}
}

// alloc replaces the slots with at least n empty ones, as many as the
// allocation's size class holds.
func (m *extMap) alloc(n int) {
	s := slices.Grow([]extSlot(nil), n)
	m.slots = s[:cap(s)]
	clear(m.slots)
}

// tailFor returns the spill tail for a table of n slots.
func tailFor(n uint64) uint64 { return max(extMapMinTail, n/64) }

// growTail lengthens the spill tail (clustering at the end of the table,
// which a good hash makes rare), keeping its last slot empty.
func (m *extMap) growTail() {
	old := m.slots
	m.alloc(len(old) + int(tailFor(uint64(len(old)))))
	copy(m.slots, old)
}

// each calls f with every entry's slot. f may change the slot's place but
// must not insert or delete.
func (m *extMap) each(f func(s *extSlot)) {
	for i := range m.slots {
		if m.slots[i].hash != 0 {
			f(&m.slots[i])
		}
	}
}
