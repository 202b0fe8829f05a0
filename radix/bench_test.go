package radix

import (
	"bufio"
	"container/list"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chain returns n local hashes: the first shared of them identical across
// callers (a system prompt), the rest specific to tag.
func chain(n, shared int, tag uint64) []uint64 {
	q := make([]uint64, n)
	for i := range q {
		if i < shared {
			q[i] = uint64(i + 1)
		} else {
			q[i] = tag<<32 | uint64(i+1)
		}
	}
	return q
}

func storeChain(ix *Index, w WorkerKey, q []uint64, extTag uint64) {
	ev := Event{Worker: w, Kind: Stored}
	for i, l := range q {
		ev.Blocks = append(ev.Blocks, Block{Hash: extTag<<40 | uint64(i+1), Local: l})
	}
	ix.Apply(&ev)
}

// BenchmarkMatch512x64 is the match target: a 512-block prompt
// against 64 workers that all hold it, with a reused Result.
func BenchmarkMatch512x64(b *testing.B) {
	ix, _ := New(Config{Shards: 1})
	q := chain(512, 512, 0)
	for w := range 64 {
		storeChain(ix, WorkerKey{uint64(w), 0}, q, uint64(w))
	}
	var r Result
	ix.Match(q, &r)
	if len(r.Matches) != 64 || r.Matches[0].Device != 512 {
		b.Fatalf("setup: %d matches", len(r.Matches))
	}
	b.ReportAllocs()
	for b.Loop() {
		ix.Match(q, &r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "us/match")
}

// BenchmarkMatch512x64Branching is a harder shape: a 128-block shared
// system prompt, then every worker on its own branch, with 8 workers
// sharing each branch for another 128 blocks; the query follows one branch.
func BenchmarkMatch512x64Branching(b *testing.B) {
	ix, _ := New(Config{Shards: 1})
	for w := range 64 {
		q := chain(512, 128, uint64(w/8)+1)
		for i := 256; i < 512; i++ {
			q[i] = uint64(w)<<48 | uint64(i)
		}
		storeChain(ix, WorkerKey{uint64(w), 0}, q, uint64(w))
	}
	q := chain(512, 128, 1)
	for i := 256; i < 512; i++ {
		q[i] = uint64(3)<<48 | uint64(i)
	}
	var r Result
	ix.Match(q, &r)
	if len(r.Matches) != 64 {
		b.Fatalf("setup: %d matches", len(r.Matches))
	}
	b.ReportAllocs()
	for b.Loop() {
		ix.Match(q, &r)
	}
}

// applyWorkload yields the KV events of 64 workers in 8 families, as
// engines serving multi-turn conversations emit them: every worker keeps a
// 64-block system prompt shared by all workers, then stores conversations of
// 128 blocks in Stored events of 32 blocks; members of a family serve the
// same 16 conversations (so most stores cover nodes that exist, as replicas
// behind one system prompt do), each under its own external hashes. Beyond
// 4 conversations a worker evicts its oldest one, leaf first, in one
// Removed event, so memory is bounded as in a real engine.
type applyWorkload struct {
	w     [64]wlWorker
	next  int
	ev    Event
	convs uint64
}

type wlWorker struct {
	sys   int      // system-prompt blocks stored (0, 32 or 64)
	pos   int      // blocks of the current conversation stored
	conv  uint64   // current conversation instance (unique per worker)
	held  []uint64 // conversation instances held, oldest first
	round uint64
}

func (a *applyWorkload) nextEvent() *Event {
	id := a.next % 64
	a.next++
	w := &a.w[id]
	ev := &a.ev
	*ev = Event{Worker: WorkerKey{uint64(id), 0}, Kind: Stored, Blocks: ev.Blocks[:0], Hashes: ev.Hashes[:0]}
	ext := func(inst uint64, i int) uint64 { return uint64(id)<<48 | inst<<20 | uint64(i+1) }
	if w.sys < 64 {
		if w.sys > 0 {
			ev.HasParent, ev.ParentHash = true, ext(0, w.sys-1)
		}
		for i := w.sys; i < w.sys+32; i++ {
			ev.Blocks = append(ev.Blocks, Block{Hash: ext(0, i), Local: uint64(i + 1)})
		}
		w.sys += 32
		return ev
	}
	if w.pos == 128 { // conversation done
		w.held = append(w.held, w.conv)
		w.pos = 0
		w.round++
		if len(w.held) > 4 {
			old := w.held[0]
			w.held = w.held[1:]
			ev.Kind = Removed
			for i := 64 + 127; i >= 64; i-- {
				ev.Hashes = append(ev.Hashes, ext(old, i))
			}
			return ev
		}
	}
	if w.pos == 0 {
		a.convs++
		w.conv = a.convs
	}
	fam, variant := uint64(id%8)+1, w.round%16
	parent := ext(0, 63)
	if w.pos > 0 {
		parent = ext(w.conv, 64+w.pos-1)
	}
	ev.HasParent, ev.ParentHash = true, parent
	for i := 64 + w.pos; i < 64+w.pos+32; i++ {
		ev.Blocks = append(ev.Blocks, Block{Hash: ext(w.conv, i), Local: fam<<40 | variant<<32 | uint64(i+1)})
	}
	w.pos += 32
	return ev
}

// BenchmarkApplyStored is the apply target: Stored events of 32
// blocks for 64 workers on one writer goroutine (with the Removed events of
// their evictions), reported as blocks stored or removed per second.
func BenchmarkApplyStored(b *testing.B) {
	ix, _ := New(Config{Shards: 1})
	var wl applyWorkload
	var blocks, stored int64
	b.ReportAllocs()
	for b.Loop() {
		ev := wl.nextEvent()
		blocks += int64(len(ev.Blocks) + len(ev.Hashes))
		stored += int64(len(ev.Blocks))
		ix.Apply(ev)
	}
	b.ReportMetric(float64(stored)/b.Elapsed().Seconds(), "stored_blocks/s")
	if d := ix.Stats().Dropped; d != [numDropReasons]uint64{} {
		b.Fatalf("drops %v", d)
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkMixed runs matches on every core (RunParallel) while one goroutine
// applies the apply workload, and reports block operations per second:
// query blocks matched plus event blocks applied, over the measured time.
func BenchmarkMixed(b *testing.B) {
	for _, writers := range []int{1, 2} {
		for _, shards := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("writers=%d/shards=%d", writers, shards), func(b *testing.B) { benchMixed(b, shards, writers) })
		}
	}
}

func benchMixed(b *testing.B, shards, writers int) {
	ix, _ := New(Config{Shards: shards})
	wls := make([]*applyWorkload, writers)
	for i := range wls {
		wls[i] = &applyWorkload{}
		for range 64 * 30 { // warm: every worker holds conversations
			ev := wls[i].nextEvent()
			ev.Worker.WorkerID += uint64(1000 * i) // each writer owns its workers
			ix.Apply(ev)
		}
	}
	// Queries: a family's conversation (any of the 16 variants) plus a new
	// 64-block turn nobody holds yet.
	queries := make([][]uint64, 128)
	for qi := range queries {
		fam, variant := uint64(qi%8)+1, uint64(qi/8)
		q := make([]uint64, 256)
		for i := range q {
			switch {
			case i < 64:
				q[i] = uint64(i + 1)
			case i < 192:
				q[i] = fam<<40 | variant<<32 | uint64(i+1)
			default:
				q[i] = 1<<63 | uint64(qi)<<32 | uint64(i)
			}
		}
		queries[qi] = q
	}
	var stop atomic.Bool
	var applied atomic.Int64
	var wg sync.WaitGroup
	for i, wl := range wls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for !stop.Load() {
				ev := wl.nextEvent()
				ev.Worker.WorkerID += uint64(1000 * i)
				n += int64(len(ev.Blocks) + len(ev.Hashes))
				ix.Apply(ev)
			}
			applied.Add(n)
		}()
	}
	var matched atomic.Int64
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var r Result
		n, i := int64(0), 0
		for pb.Next() {
			q := queries[i%len(queries)]
			i++
			ix.Match(q, &r)
			n += int64(len(q))
		}
		matched.Add(n)
	})
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(matched.Load()+applied.Load())/elapsed.Seconds(), "blockops/s")
	b.ReportMetric(float64(applied.Load())/elapsed.Seconds(), "applied_blocks/s")
}

// mooncakeTrace is the Mooncake JSONL trace BenchmarkMooncakeReplay
// replays, by default its first mooncakeRequests requests: the public
// mooncake_trace_1000.jsonl of bench/testdata (the repository's one
// copy); -mooncake-trace FILE replays another, -mooncake-requests 0 all
// of it.
var (
	mooncakeTrace    = flag.String("mooncake-trace", "../bench/testdata/mooncake_trace_1000.jsonl", "Mooncake JSONL trace for BenchmarkMooncakeReplay")
	mooncakeRequests = flag.Int("mooncake-requests", 200, "requests of -mooncake-trace BenchmarkMooncakeReplay replays (0: all)")
)

// BenchmarkMooncakeReplay replays *mooncakeTrace into 8 simulated workers: each request's 512-token hash ids are expanded to
// 16-token blocks (32 per id), matched against the index, routed to the
// worker with the longest match (ties to the least-used), and the worker
// stores the blocks it lacked, evicting least recently used leaf blocks
// beyond 16,384 blocks (Removed events). Block ops = query blocks + stored
// and removed blocks.
func BenchmarkMooncakeReplay(b *testing.B) {
	reqs := loadTrace(b, *mooncakeTrace, 32)
	b.ReportAllocs()
	var ops int64
	var inIndex time.Duration
	for b.Loop() {
		n, d := replayTrace(b, reqs, 8, 16384)
		ops += n
		inIndex += d
	}
	b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "blockops/s")
	b.ReportMetric(float64(ops)/inIndex.Seconds(), "index_blockops/s")
}

func loadTrace(b *testing.B, path string, factor uint64) [][]uint64 {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out [][]uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if *mooncakeRequests > 0 && len(out) == *mooncakeRequests {
			break
		}
		var rec struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			b.Fatal(err)
		}
		var q []uint64
		for _, h := range rec.HashIDs {
			for j := range factor {
				q = append(q, h*factor+j+1)
			}
		}
		out = append(out, q)
	}
	if err := sc.Err(); err != nil || len(out) == 0 {
		b.Fatalf("trace %s: %d requests, %v", path, len(out), err)
	}
	return out
}

// simWorker mirrors what an engine holds: blocks by path, with LRU eviction
// of leaf blocks, so its events never contradict the index.
type simWorker struct {
	key    WorkerKey
	blocks map[uint64]*simBlock // by external hash (= path hash here)
	leaves *list.List           // leaf blocks, least recently used at the front
	uses   int
}

type simBlock struct {
	ext, parent uint64
	hasParent   bool
	children    int
	leaf        *list.Element
}

// replayTrace returns the block ops and the time spent inside the index
// (Match and Apply), to separate the index's cost from the simulation's.
func replayTrace(b *testing.B, reqs [][]uint64, nWorkers, capacity int) (int64, time.Duration) {
	ix, _ := New(Config{})
	workers := make([]*simWorker, nWorkers)
	for i := range workers {
		workers[i] = &simWorker{key: WorkerKey{uint64(i), 0}, blocks: map[uint64]*simBlock{}, leaves: list.New()}
	}
	var r Result
	var ops int64
	var ev Event
	seq := make([]uint64, 0, 1024)
	var inIndex time.Duration
	for _, q := range reqs {
		t0 := time.Now()
		ix.Match(q, &r)
		inIndex += time.Since(t0)
		ops += int64(len(q))
		best, depth := workers[0], -1
		for _, w := range workers {
			d := 0
			for _, m := range r.Matches {
				if m.Worker == w.key {
					d = int(m.Device)
				}
			}
			if d > depth || (d == depth && w.uses < best.uses) {
				best, depth = w, d
			}
		}
		best.uses++
		// External hash = sequence hash of the path, as an engine would.
		seq = SequenceHashes(seq[:0], q)
		ev = Event{Worker: best.key, Kind: Stored, Blocks: ev.Blocks[:0]}
		start := 0
		for start < len(q) && best.blocks[seq[start]] != nil {
			best.touch(seq[start])
			start++
		}
		if start > 0 {
			ev.HasParent, ev.ParentHash = true, seq[start-1]
		}
		for i := start; i < len(q); i++ {
			ev.Blocks = append(ev.Blocks, Block{Hash: seq[i], Local: q[i]})
			best.add(seq[i], ev.HasParent || i > start, parentOf(seq, i))
		}
		if len(ev.Blocks) > 0 {
			t0 := time.Now()
			ix.Apply(&ev)
			inIndex += time.Since(t0)
			ops += int64(len(ev.Blocks))
		}
		// Evict beyond capacity, leaves first.
		ev = Event{Worker: best.key, Kind: Removed, Hashes: ev.Hashes[:0]}
		for len(best.blocks) > capacity {
			ev.Hashes = append(ev.Hashes, best.evict())
		}
		if len(ev.Hashes) > 0 {
			t0 := time.Now()
			ix.Apply(&ev)
			inIndex += time.Since(t0)
			ops += int64(len(ev.Hashes))
		}
	}
	if st := ix.Stats(); st.Dropped != [numDropReasons]uint64{} {
		b.Fatalf("replay produced drops: %v", st.Dropped)
	}
	return ops, inIndex
}

func parentOf(seq []uint64, i int) uint64 {
	if i == 0 {
		return 0
	}
	return seq[i-1]
}

func (w *simWorker) touch(h uint64) {
	if bl := w.blocks[h]; bl.leaf != nil {
		w.leaves.MoveToBack(bl.leaf)
	}
}

func (w *simWorker) add(h uint64, hasParent bool, parent uint64) {
	bl := &simBlock{ext: h, parent: parent, hasParent: hasParent}
	w.blocks[h] = bl
	if hasParent {
		p := w.blocks[parent]
		if p.children == 0 && p.leaf != nil {
			w.leaves.Remove(p.leaf)
			p.leaf = nil
		}
		p.children++
	}
	bl.leaf = w.leaves.PushBack(bl)
}

func (w *simWorker) evict() uint64 {
	bl := w.leaves.Remove(w.leaves.Front()).(*simBlock)
	delete(w.blocks, bl.ext)
	if bl.hasParent {
		p := w.blocks[bl.parent]
		p.children--
		if p.children == 0 {
			p.leaf = w.leaves.PushFront(p) // evicted next: LRU of the subtree it headed
		}
	}
	return bl.ext
}

// memShape describes an index built for the memory measurements: workers
// in families of 8, each holding a 64-block system prompt and convs
// conversations of 128 blocks, stored in chained Stored events of 32
// blocks with well-mixed external hashes unique to the worker. With shared,
// every worker's system prompt has the same local hashes and the members
// of a family hold the same conversations (replicas behind one prompt, so
// most (worker, block) pairs sit on nodes that 8 workers cover); without,
// every worker's blocks are its own (a tree of 64 disjoint chains' worth of
// edges).
type memShape struct {
	workers, convs int
	shared         bool
}

func (s memShape) blocksPerWorker() int { return 64 + 128*s.convs }

// build applies the shape's events to ix, one worker after another.
func (s memShape) build(ix *Index) {
	ev := Event{Kind: Stored, Blocks: make([]Block, 0, 32)}
	for w := range s.workers {
		mix := func(x uint64) uint64 { // splitmix64: engine hashes look random
			x += 0x9E3779B97F4A7C15
			x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
			x = (x ^ x>>27) * 0x94D049BB133111EB
			return x ^ x>>31
		}
		local := func(conv, i int) uint64 {
			fam := w / 8
			if !s.shared {
				fam = 1000 + w
			}
			if conv == 0 && s.shared {
				return mix(uint64(i)) // the system prompt, shared by all
			}
			return mix(uint64(fam)<<40 | uint64(conv)<<20 | uint64(i))
		}
		ext := func(conv, i int) uint64 { return mix(1<<63 | uint64(w)<<40 | uint64(conv)<<20 | uint64(i)) }
		emit := func(conv, from, n int, parent uint64, hasParent bool) {
			ev.Worker = WorkerKey{uint64(w), 0}
			ev.HasParent, ev.ParentHash = hasParent, parent
			ev.Blocks = ev.Blocks[:0]
			for i := from; i < from+n; i++ {
				ev.Blocks = append(ev.Blocks, Block{Hash: ext(conv, i), Local: local(conv, i)})
			}
			ix.Apply(&ev)
		}
		// conv 0 is the system prompt (blocks 0..63); conversations 1..convs
		// continue after its last block.
		emit(0, 0, 32, 0, false)
		emit(0, 32, 32, ext(0, 31), true)
		for c := 1; c <= s.convs; c++ {
			parent := ext(0, 63)
			for j := 0; j < 128; j += 32 {
				emit(c, 64+j, 32, parent, true)
				parent = ext(c, 64+j+31)
			}
		}
	}
}

// heapPerBlock builds s into a new index and returns the live heap the
// index added (runtime.MemStats.HeapAlloc after a full GC, before and
// after) per device (worker, block) pair, and that pair count.
func heapPerBlock(tb testing.TB, s memShape) (float64, int64) {
	per, blocks, ix := buildMeasured(tb, s)
	if err := checkIndex(ix); err != nil {
		tb.Fatalf("%+v: %v", s, err)
	}
	return per, blocks
}

// buildMeasured is heapPerBlock, also returning the index.
func buildMeasured(tb testing.TB, s memShape) (float64, int64, *Index) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix, _ := New(Config{})
	for _, sh := range ix.shards {
		// An O(tree) check per store would make the build quadratic
		// (-tags invariants); heapPerBlock checks the index once.
		sh.tree.unchecked = true
	}
	s.build(ix)
	runtime.GC()
	runtime.ReadMemStats(&after)
	blocks := ix.Stats().Blocks[TierDevice]
	if want := int64(s.workers * s.blocksPerWorker()); blocks != want || ix.Stats().Dropped != [numDropReasons]uint64{} {
		tb.Fatalf("built %d blocks (want %d), drops %v", blocks, want, ix.Stats().Dropped)
	}
	runtime.KeepAlive(ix)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(blocks), blocks, ix
}

// BenchmarkMemory builds an index of about 2 M (worker, block) pairs (64
// workers of 32,704 blocks) in both shapes and reports the live heap per
// pair. The time per op is the build time; gc_ms is the time of a full
// garbage collection with the index live (marking scales with the
// pointers in the live heap).
func BenchmarkMemory(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := map[bool]string{true: "shared", false: "distinct"}[shared]
		b.Run(name, func(b *testing.B) {
			s := memShape{workers: 64, convs: 255, shared: shared}
			var per float64
			var ix *Index
			for b.Loop() {
				per, _, ix = buildMeasured(b, s)
			}
			start := time.Now()
			for range 3 {
				runtime.GC()
			}
			gc := time.Since(start) / 3
			runtime.KeepAlive(ix)
			b.ReportMetric(per, "bytes/block")
			b.ReportMetric(float64(s.workers*s.blocksPerWorker()), "blocks")
			b.ReportMetric(float64(gc.Microseconds())/1000, "gc_ms")
		})
	}
}
