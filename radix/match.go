package radix

// Match is what the index knows about one worker rank for one request.
// Depths are in blocks of the request's prefix.
type Match struct {
	Worker WorkerKey
	// Device is the length of the request's prefix cached on the device
	// tier (the primary tree).
	Device uint32
	// Host, Disk and External are extension blocks: the lower tiers continue
	// in that order from where the previous tier stopped.
	Host, Disk, External uint32

	// last is the worker's external hash of the last block matched so far
	// (the seed of the next tier); valid when the walk so far matched > 0.
	last    uint64
	hasLast bool
}

// Cumulative returns the Mooncake overlap values in blocks: gpu <= cpu <=
// disk, where cpu adds the host extension and disk the disk and external
// extensions. Multiply by the block size for tokens.
func (m Match) Cumulative() (gpu, cpu, disk uint32) {
	gpu = m.Device
	cpu = gpu + m.Host
	disk = cpu + m.Disk + m.External
	return gpu, cpu, disk
}

// Result holds the matches of one query. Reuse it across queries: its
// buffers are kept, so a warmed-up Result makes Match allocation-free.
// Matches is valid until the Result's next use.
type Result struct {
	Matches []Match

	active, next []activeEntry
}

type activeEntry struct {
	key  WorkerKey
	last uint64
}

// Reset empties r, keeping its buffers.
func (r *Result) Reset() { r.Matches = r.Matches[:0] }

func (r *Result) emit(w WorkerKey, depth int, last uint64) {
	if depth == 0 {
		return
	}
	r.Matches = append(r.Matches, Match{Worker: w, Device: uint32(depth), last: last, hasLast: true})
}

// match appends to r.Matches every worker rank that holds a non-empty
// prefix of q, with its depth. It never blocks: it reads immutable node
// states. Under concurrent writes the result is weakly consistent (each node
// is seen at one moment), like Dynamo's.
func (t *Tree) match(q []uint64, r *Result) {
	if len(q) == 0 {
		return
	}
	n := t.root.state.Load().children.get(q[0])
	depth := 0
	active := r.active[:0]
	next := r.next[:0]
	first := true
	for n != nil {
		st := n.state.Load()
		e := st.edge
		m := 0
		for m < len(e) && depth+m < len(q) && e[m] == q[depth+m] {
			m++
		}
		if m == 0 {
			break // only under a torn read: the child's key no longer matches
		}
		full := m == len(e)
		next = next[:0]
		if first {
			for _, o := range st.owners {
				if full && len(o.ext) == len(e) {
					next = append(next, activeEntry{o.key, o.ext[len(e)-1]})
				} else {
					c := min(len(o.ext), m)
					r.emit(o.key, depth+c, o.ext[c-1])
				}
			}
			first = false
		} else {
			// Both lists are sorted by worker: one merge pass. A worker that
			// covered the previous node but is absent here stops at depth.
			j := 0
			for _, a := range active {
				for j < len(st.owners) && cmpKey(st.owners[j].key, a.key) < 0 {
					j++
				}
				if j == len(st.owners) || st.owners[j].key != a.key {
					r.emit(a.key, depth, a.last)
					continue
				}
				o := st.owners[j]
				if full && len(o.ext) == len(e) {
					next = append(next, activeEntry{a.key, o.ext[len(e)-1]})
				} else {
					c := min(len(o.ext), m)
					r.emit(a.key, depth+c, o.ext[c-1])
				}
			}
		}
		depth += m
		active, next = next, active
		if !full || depth == len(q) || len(active) == 0 {
			break
		}
		n = st.children.get(q[depth])
	}
	for _, a := range active {
		r.emit(a.key, depth, a.last)
	}
	r.active, r.next = active[:0], next[:0]
}

// PrefixHashes appends to dst w's external hashes of the blocks of q's
// prefix that w holds on the device tier, at most limit of them, in order.
// It is what a kv hint sends: entry i is request block i.
func (t *Tree) PrefixHashes(dst []uint64, w WorkerKey, q []uint64, limit int) []uint64 {
	depth := 0
	if len(q) == 0 {
		return dst
	}
	n := t.root.state.Load().children.get(q[0])
	for n != nil && depth < limit {
		st := n.state.Load()
		i, ok := st.find(w)
		if !ok {
			break
		}
		ext := st.owners[i].ext
		m := 0
		for m < len(ext) && depth+m < len(q) && depth+m < limit && st.edge[m] == q[depth+m] {
			m++
		}
		dst = append(dst, ext[:m]...)
		depth += m
		if m < len(st.edge) || depth == len(q) {
			break
		}
		n = st.children.get(q[depth])
	}
	return dst
}

// dump calls emit with one Stored event per (node, owner), parents before
// children (breadth first), each chained to the owner's own hash of the
// parent node's last block. The Blocks slice passed to emit is reused.
func (t *Tree) dump(emit func(ev *Event)) {
	type item struct {
		n      *node
		parent *nodeState // nil below the root
	}
	queue := []item{}
	t.root.state.Load().children.each(func(_ uint64, c *node) { queue = append(queue, item{c, nil}) })
	var ev Event
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		st := it.n.state.Load()
		for _, o := range st.owners {
			ev = Event{Worker: o.key, Tier: TierDevice, Kind: Stored, Blocks: ev.Blocks[:0]}
			if it.parent != nil {
				pi, ok := it.parent.find(o.key)
				if !ok || len(it.parent.owners[pi].ext) != len(it.parent.edge) {
					continue // torn read under concurrent writes
				}
				ev.HasParent, ev.ParentHash = true, it.parent.owners[pi].ext[len(it.parent.edge)-1]
			}
			for i, h := range o.ext {
				ev.Blocks = append(ev.Blocks, Block{Hash: h, Local: st.edge[i]})
			}
			emit(&ev)
		}
		st.children.each(func(_ uint64, c *node) { queue = append(queue, item{c, st}) })
	}
}
