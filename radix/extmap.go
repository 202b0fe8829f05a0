package radix

// extMap is the per-worker lookup from external block hash to the block's
// place in the tree: an open-addressing hash table with linear probing and
// backward-shift deletion.
//
// Why not a Go map: the apply path does one lookup and one insert per
// stored block per worker, and with Go's map these were 45% of the apply
// profile (mapassign_fast64 36%, mapaccess2 11%; BenchmarkApplyStored,
// 2.6 M blocks/s). Keys are engine block hashes, already well mixed, so a
// multiplicative hash and linear probing over one flat slice suffice.
//
// Representation: an empty slot has n == nil (a stored ref always points at
// a node). len(slots) is a power of two, and count <= len(slots)*3/4.
type extMap struct {
	slots []extSlot
	count int
	shift uint8 // 64 - log2(len(slots))
}

type extSlot struct {
	key uint64
	ref
}

const extMapMinSize = 16

func (m *extMap) index(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> m.shift)
}

// Len returns the number of keys.
func (m *extMap) Len() int { return m.count }

func (m *extMap) get(k uint64) (ref, bool) {
	if m.count == 0 {
		return ref{}, false
	}
	mask := len(m.slots) - 1
	for i := m.index(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.n == nil {
			return ref{}, false
		}
		if s.key == k {
			return s.ref, true
		}
	}
}

// put sets k to r. r.n must not be nil. Updating a present key never moves
// entries, so it is allowed inside each.
func (m *extMap) put(k uint64, r ref) {
	if len(m.slots) == 0 {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.index(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.key == k && s.n != nil {
			s.ref = r
			return
		}
		if s.n == nil {
			if (m.count+1)*4 > len(m.slots)*3 {
				m.grow()
				m.put(k, r)
				return
			}
			*s = extSlot{k, r}
			m.count++
			return
		}
	}
}

// del removes k if present, shifting later entries of its probe run back so
// that no lookup ever stops at a hole in the middle of a run.
func (m *extMap) del(k uint64) {
	if m.count == 0 {
		return
	}
	mask := len(m.slots) - 1
	i := m.index(k)
	for {
		s := &m.slots[i]
		if s.n == nil {
			return
		}
		if s.key == k {
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &m.slots[j]
		if s.n == nil {
			break
		}
		// s may move to the hole at i if its home is not in (i, j].
		home := m.index(s.key)
		if (j-home)&mask >= (j-i)&mask {
			m.slots[i] = *s
			i = j
		}
	}
	m.slots[i] = extSlot{}
	m.count--
}

func (m *extMap) grow() {
	size := max(extMapMinSize, 2*len(m.slots))
	old := m.slots
	m.slots = make([]extSlot, size)
	m.shift = uint8(64 - log2(size))
	m.count = 0
	for i := range old {
		if old[i].n != nil {
			m.put(old[i].key, old[i].ref)
		}
	}
}

// each calls f for every entry. f must not modify the map, except through
// set on the entry it is given.
func (m *extMap) each(f func(k uint64, r *ref)) {
	for i := range m.slots {
		if m.slots[i].n != nil {
			f(m.slots[i].key, &m.slots[i].ref)
		}
	}
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
