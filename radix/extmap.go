package radix

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// extMap is the per-worker lookup from external block hash to the block's
// place in the tree. It stores no keys: a slot holds some bits of the
// key's hash and the block's place, and the tree confirms a candidate by
// reading the worker's external hash at that place (Tree.locate), which
// the tree stores anyway for readers.
//
// Memory: a slot is one little-endian integer of w bytes packing, from the
// high bits down, hb hash bits, the node id (ib bits) and the offset (ob
// bits), each field as wide as the table needs: ib and ob for the largest
// id and offset it holds (rebuild widens them when an entry needs it and
// narrows them at a shrink or rekey), hb for its size and whatever the
// slot's last byte leaves (see rekey). 5 bytes in BenchmarkMemory's
// tables of 32 K entries (19 hash, 13 id and 8 offset bits when every
// worker's blocks are its own), 4 in TestMemoryPerBlock's of one and two
// thousand, where the slot of (32 hash bits, id, offset) took 12. No
// pointer, so the garbage collector does not scan the table either.
//
// Representation: an ordered linear-probing table. A key's home slot is
// its hash bits scaled to [0, size) (so size need not be a power of two);
// an entry sits at or after its home with no empty slot in between, and
// occupied slots hold nondecreasing hash bits along the whole array. So a
// lookup stops at the first larger hash bits (a miss costs about what a
// hit does, which is what keeps 7/8 full cheap), an insert shifts the run
// after its place right by one slot (one memmove), a delete shifts the
// displaced entries after it left, and a resize is one in-order pass that
// needs no keys. Entries near the end spill into a tail past size instead
// of wrapping around. A slot is empty exactly when it is 0: no entry names
// node 0 (the root).
//
// Hash bits: a key's hash bits are the top hb bits of key*φ64 (engine block
// hashes are already well mixed; the multiply spreads structured ones).
// Fewer bits only make more entries share a key's bits, which the tree's
// confirmation rejects: hb shrinks freely (truncating every entry's bits
// keeps the order) when the id and offset need the room. It grows only
// with the keys, which the tree reads for the table (rekey) when the
// table has grown to where its bits no longer tell most entries apart
// (extRekeyBits), or when wider places left spare bits in the slots.
// BenchmarkMemory's builds read 0.15 (distinct) and 0.41 (shared) keys
// per entry so.
//
// Why not a Go map: the apply path does one lookup and one insert per
// stored block per worker, and with Go's map these were 45% of the apply
// profile (mapassign_fast64 36%, mapaccess2 11%; BenchmarkApplyStored,
// 2.6 M blocks/s).
type extMap struct {
	// b holds n slots of w bytes, little endian, then 8 bytes of padding
	// so that any slot can be read as one 8-byte load.
	b []byte
	// n counts the slots: size home slots and the spill tail, whose last
	// slot is always empty.
	n     int
	size  uint64 // number of home slots
	count int

	w          uint // slot width in bytes, 1 to 8
	hb, ib, ob uint // widths of the hash, id and offset fields: hb+ib+ob <= 8w, ib >= 1, ob <= 31 (so hb >= 1)
	// Derived from the widths (see layout).
	mask            uint64 // the low 8w bits
	idMask, offMask uint64
	low             uint64 // the id and offset fields: 1<<hs - 1
	hmask           uint64 // the top hb bits
	hs, hshift      uint   // ib+ob, where the hash field starts; 64-hb
	rekeyDue        bool   // see wantsRekey
}

const (
	extMapMinSize = 8
	extMapMinTail = 8

	// extSpareBits is how many hash bits beyond the table size's bit
	// length a rekey gives (at least): entries sharing a key's bits
	// number about count/2^hb, under 1/16 of a lookup after it.
	extSpareBits = 4
	// extRekeyBits is the fewest spare bits a table keeps: the rekey that
	// restores extSpareBits comes when the table has grown about 4 times.
	extRekeyBits = 2
)

const phi64 = 0x9E3779B97F4A7C15

// noSlots is the padding of every empty table, which reads it and never
// writes it (an insert allocates first).
var noSlots [8]byte

// newExtMap returns an empty table. (The zero extMap is not one: seek
// reads its padding.)
func newExtMap() extMap { return extMap{b: noSlots[:]} }

// A table grows past extMaxNum/extLoadDen full, to extResizeNum/extLoadDen.
const (
	extLoadDen   = 16
	extMaxNum    = 14
	extResizeNum = 13
)

// overfull reports whether n entries are too many for the home slots.
func (m *extMap) overfull(n int) bool { return uint64(n)*extLoadDen > m.size*extMaxNum }

// Len returns the number of entries.
func (m *extMap) Len() int { return m.count }

// at returns the value of slot i (0 if empty).
func (m *extMap) at(i int) uint64 { return load8(m.b, i*int(m.w)) & m.mask }

// load8 reads the 8 bytes at b[p:] as one load.
func load8(b []byte, p int) uint64 { return binary.LittleEndian.Uint64(b[p : p+8 : p+8]) }

// put stores v in slot i, keeping the bytes of the slots after it.
func (m *extMap) put(i int, v uint64) {
	p := m.b[i*int(m.w):]
	binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)&^m.mask|v)
}

// The shifts below are by amounts in [0, 63] (see the widths), which
// "&63" tells the compiler.

// hashOf returns k's hash bits in this table.
func (m *extMap) hashOf(k uint64) uint64 { return (k * phi64) >> (m.hshift & 63) }

// hashAt, idAt and offAt unpack a slot's value.
func (m *extMap) hashAt(v uint64) uint64 { return v >> (m.hs & 63) }
func (m *extMap) idAt(v uint64) uint32   { return uint32(v >> (m.ob & 63) & m.idMask) }
func (m *extMap) offAt(v uint64) uint32  { return uint32(v & m.offMask) }

// pack builds a slot value; id and off must fit the table's widths.
func (m *extMap) pack(h uint64, id, off uint32) uint64 {
	return h<<(m.hs&63) | uint64(id)<<(m.ob&63) | uint64(off)
}

// fits reports whether (id, off) fit the table's widths.
func (m *extMap) fits(id, off uint32) bool {
	return uint64(id) <= m.idMask && uint64(off) <= m.offMask
}

// home scales hash bits h to [0, size).
func (m *extMap) home(h uint64) int {
	hi, _ := bits.Mul64(h<<(m.hshift&63), m.size)
	return int(hi)
}

// seek returns where k's run starts, and the run's key: the first slot
// from k's home that is empty or holds hash bits >= k's. The entries of
// the run (see candidate) hold k's hash bits; the caller confirms which of
// them, if any, is k.
func (m *extMap) seek(k uint64) (int, uint64) {
	hx := k * phi64 & m.hmask
	i, _ := bits.Mul64(hx, m.size) // home(hashOf(k))
	run := hx >> (m.hshift & 63) << (m.hs & 63)
	// run is k's hash bits with id and offset 0, which no slot holds (no
	// entry names node 0): an occupied slot v holds lower bits exactly
	// when v-1 < run, and an empty one (0) never does.
	for m.at(int(i))-1 < run {
		i++
	}
	return int(i), run
}

// candidate returns the place held by slot i if it is in the run seek
// returned (ok false past its end).
func (m *extMap) candidate(i int, run uint64) (id, off uint32, ok bool) {
	if i >= m.n { // an empty table (a run ends at the last slot, empty)
		return 0, 0, false
	}
	// Slot value v is in the run when run < v < run+1<<hs (0 is not).
	if v := m.at(i); v-run-1 < m.low {
		return m.idAt(v), m.offAt(v), true
	}
	return 0, 0, false
}

// setPlace moves the entry in slot i to (id, off), widening the table if
// they do not fit (which may move any entry).
func (m *extMap) setPlace(i int, id, off uint32) {
	if !m.fits(id, off) {
		v, hb := m.at(i), m.hb
		h, oldID, oldOff := m.hashAt(v), m.idAt(v), m.offAt(v)
		m.rebuild(m.count, id, off, false)
		h >>= hb - m.hb
		v = m.pack(h, oldID, oldOff)
		// Find the entry again (an equal value, if any, is an equal entry).
		for i = m.home(h); m.at(i) != v; i++ {
		}
	}
	m.put(i, m.pack(m.hashAt(m.at(i)), id, off))
}

// insert adds an entry for k at (id, off); k must not be present (the tree
// checks with seek first). It may move any entry.
func (m *extMap) insert(k uint64, id, off uint32) {
	if m.overfull(m.count+1) || !m.fits(id, off) {
		m.rebuild(m.count+1, id, off, false)
	}
	// Slot i is its place: the entries from there hold bits >= its own
	// (among equal bits, order does not matter), and i >= its home.
	i, run := m.seek(k)
	b, mask, w := m.b, m.mask, int(m.w)
	e := i * w // byte offset of the first empty slot from i
	for load8(b, e)&mask != 0 {
		e += w
	}
	if e == (m.n-1)*w {
		m.growTail()
		b = m.b
	}
	copy(b[i*w+w:e+w], b[i*w:e])
	m.put(i, run|uint64(id)<<(m.ob&63)|uint64(off))
	m.count++
}

// deleteAt removes the entry in slot i, shifting the displaced entries
// after it back by one, and shrinks a table left under 1/4 full (a worker
// that evicted most of its blocks). It may move any entry.
func (m *extMap) deleteAt(i int) {
	b, mask, w := m.b, m.mask, int(m.w)
	hs, shift, size := m.hs&63, m.hshift&63, m.size
	e := i + 1
	for p := e * w; ; p += w {
		v := load8(b, p) & mask
		if v == 0 {
			break
		}
		if home, _ := bits.Mul64(v>>hs<<shift, size); int(home) >= e {
			break
		}
		e++
	}
	copy(b[i*w:(e-1)*w], b[(i+1)*w:e*w])
	clear(b[(e-1)*w : e*w])
	m.count--
	if m.size > extMapMinSize && uint64(m.count)*4 < m.size {
		m.rebuild(m.count, 0, 0, true)
	}
}

// rebuild resizes the table for n entries, in one pass in order, with
// fields wide enough for (id, off) too; narrow also narrows them to the
// entries' largest id and offset (a shrink does: the worker let most of
// its blocks go). It takes the smallest allocation that leaves the table
// at most extResizeNum/extLoadDen full: the allocator rounds the request
// up to its size class (up to 1/4 more, near 32 KiB) and the slack becomes
// home slots. Growing this often (every 8% more entries) costs little
// because a resize is a sequential copy. The hash bits stay, truncated if
// the places leave them less than 64 bits; an empty table takes
// extSpareBits beyond its size's bit length.
func (m *extMap) rebuild(n int, id, off uint32, narrow bool) {
	ib, ob := max(1, m.ib, uint(bits.Len32(id))), max(m.ob, uint(bits.Len32(off)))
	if narrow {
		maxID, maxOff := id, off
		for i := 0; i < m.n; i++ {
			if v := m.at(i); v != 0 {
				maxID, maxOff = max(maxID, m.idAt(v)), max(maxOff, m.offAt(v))
			}
		}
		ib, ob = max(1, uint(bits.Len32(maxID))), uint(bits.Len32(maxOff))
	}
	if ob > 31 {
		panic("radix: an edge of more than 2^31 blocks")
	}
	size := max(extMapMinSize, uint64(n)*extLoadDen/extResizeNum+1)
	hb := m.hb
	if m.count == 0 {
		hb = uint(bits.Len64(size)) + extSpareBits
	}
	hb = min(hb, 64-ib-ob)
	old := *m
	m.layout(size, hb, ib, ob)
	if hb != old.hb || ib != old.ib || ob != old.ob {
		next := 0
		for i := 0; i < old.n; i++ {
			if v := old.at(i); v != 0 {
				next = m.place(next, m.pack(old.hashAt(v)>>(old.hb-hb), old.idAt(v), old.offAt(v)))
			}
		}
		return
	}
	// The common case, a resize: the values stay. This is place's loop,
	// by hand (the build of BenchmarkMemory spends a third of its time
	// here).
	ow, w, hs, shift := int(old.w), int(m.w), m.hs&63, m.hshift&63
	next := 0
	for p := 0; p < old.n*ow; p += ow {
		v := load8(old.b, p) & old.mask
		if v == 0 {
			continue
		}
		home, _ := bits.Mul64(v>>hs<<shift, m.size)
		j := max(int(home), next)
		if j >= m.n-1 {
			m.growTail()
		}
		binary.LittleEndian.PutUint64(m.b[j*w:], v) // the slots after j are empty
		next = j + 1
	}
}

// layout makes m an empty table of at least size home slots with the
// given field widths, in the smallest slot width that holds them.
func (m *extMap) layout(size uint64, hb, ib, ob uint) {
	*m = extMap{count: m.count, hb: hb, ib: ib, ob: ob, hs: ib + ob, hshift: 64 - hb}
	m.idMask, m.offMask, m.low, m.hmask = 1<<ib-1, 1<<ob-1, 1<<(ib+ob)-1, ^uint64(0)<<(64-hb)
	m.w = max(1, (hb+ib+ob+7)/8)
	m.mask = ^uint64(0) >> (64 - 8*m.w)
	m.alloc(int(size + tailFor(size)))
	m.size = max(size, uint64(m.n)-tailFor(uint64(m.n)))
	spare := 8*m.w - hb - ib - ob
	m.rekeyDue = (hb < uint(bits.Len64(m.size))+extRekeyBits || spare >= extSpareBits) && hb+ib+ob < 64
}

// place puts v, an entry whose hash bits are >= those of every entry
// placed so far, in the first free slot from its home and next (the slot
// after the last one placed), and returns the new next.
func (m *extMap) place(next int, v uint64) int {
	j := max(m.home(m.hashAt(v)), next)
	if j >= m.n-1 {
		m.growTail()
	}
	// The slots after j are empty: the load's upper bytes may zero them.
	binary.LittleEndian.PutUint64(m.b[j*int(m.w):], v)
	return j + 1
}

// alloc replaces the slots with at least n empty ones, as many as the
// allocation's size class holds.
func (m *extMap) alloc(n int) {
	s := slices.Grow([]byte(nil), n*int(m.w)+8)
	m.b = s[:cap(s)] // zeroed, as all memory Go hands out
	m.n = (len(m.b) - 8) / int(m.w)
}

// tailFor returns the spill tail for a table of n slots.
func tailFor(n uint64) uint64 { return max(extMapMinTail, n/64) }

// growTail lengthens the spill tail (clustering at the end of the table,
// which a good hash makes rare), keeping its last slot empty.
func (m *extMap) growTail() {
	old := m.b[:m.n*int(m.w)]
	m.alloc(m.n + int(tailFor(uint64(m.n))))
	copy(m.b, old)
}

// wantsRekey reports whether the table has outgrown its hash bits (see
// extRekeyBits), or its slots have extSpareBits the hash bits could use
// (its places widened the slots: a rekey now saves the one that would
// come later, when the table is bigger), and more would fit.
func (m *extMap) wantsRekey() bool { return m.rekeyDue }

// rekey gives the table extSpareBits hash bits beyond its size's bit
// length (or as many as fit in 8 bytes). The tree resolves each entry's
// place to the block's current one (resolve: a split moved it) and reads
// the key there (keyOf); the entries keep the resolved places, in fields
// narrowed to what they hold. It may move any entry.
func (m *extMap) rekey(resolve func(id, off uint32) (uint32, uint32), keyOf func(id, off uint32) uint64) {
	maxID, maxOff := uint32(0), uint32(0)
	for i := 0; i < m.n; i++ {
		if v := m.at(i); v != 0 {
			id, off := resolve(m.idAt(v), m.offAt(v))
			maxID, maxOff = max(maxID, id), max(maxOff, off)
		}
	}
	ib, ob := max(1, uint(bits.Len32(maxID))), uint(bits.Len32(maxOff))
	w := min(8, (uint(bits.Len64(m.size))+extSpareBits+ib+ob+7)/8)
	hb := 8*w - ib - ob
	vals := make([]uint64, 0, m.count)
	for i := 0; i < m.n; i++ {
		if v := m.at(i); v != 0 {
			id, off := resolve(m.idAt(v), m.offAt(v))
			vals = append(vals, (keyOf(id, off)*phi64)>>(64-hb)<<(ib+ob)|uint64(id)<<ob|uint64(off))
		}
	}
	// Sorted but for runs of equal old bits when the new bits refine the
	// old (the usual rekey), which pdqsort handles in about linear time;
	// n log n otherwise, colliding hashes included.
	slices.Sort(vals)
	m.layout(m.size, hb, ib, ob)
	next := 0
	for _, v := range vals {
		next = m.place(next, v)
	}
}

// each calls f with every entry's place.
func (m *extMap) each(f func(id, off uint32)) {
	for i := 0; i < m.n; i++ {
		if v := m.at(i); v != 0 {
			f(m.idAt(v), m.offAt(v))
		}
	}
}
