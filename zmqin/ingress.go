package zmqin

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// Config configures an Ingress. The zero Config is valid: every zero field
// takes the default named beside it.
type Config struct {
	// Writers is the number of writer goroutines that apply decoded events
	// to sinks; a worker always maps to the same writer. 0 means
	// DefaultWriters().
	Writers int
	// QueueLimit is the number of received messages one rank may hold
	// queued or being processed (decode, sequence checks, replay). A
	// message arriving at a full queue is dropped and counted (Overflow);
	// the listener then sees a sequence gap. The queue (32 bytes a slot)
	// exists only while the rank is connected. 0 means 1024.
	QueueLimit int
	// MaxQueueBytes bounds the payload bytes one rank's queue holds, and
	// MaxTotalQueueBytes those of every rank's queue together (a message
	// counts from the moment it is queued until its listener is done
	// with it). A message that would exceed either is dropped like one
	// arriving at a full queue (Overflow, then a gap). Without them a
	// rank's queue could hold QueueLimit messages of MaxMessageSize each
	// (64 GiB); forty 53 MiB batches took a process to 4.7 GB. 0 means
	// 64 MiB per rank: one message of the default MaxMessageSize fits,
	// and so do hundreds of the largest batches an engine step publishes
	// (the stores of at most max_num_batched_tokens tokens, typically 8
	// to 64 Ki, about 5 bytes each: a few hundred KiB). 0 means 256 MiB in
	// total, four ranks at their limit: the queues stay a small part of a
	// selector's memory whatever the number of ranks, and a burst beyond
	// them becomes gaps, which replay heals where the worker has a replay
	// endpoint. MaxQueueBytes must be at least MaxMessageSize, and
	// MaxTotalQueueBytes at least MaxQueueBytes.
	MaxQueueBytes, MaxTotalQueueBytes int
	// WriterQueue is the number of decoded batches a writer may have
	// pending; a listener blocks when its writer's queue is full, and
	// then its own queue fills. 0 means 256.
	WriterQueue int
	// MaxApplyEvents caps the events a writer passes to one
	// EventSink.ApplyBatch call when it coalesces consecutive batches of
	// one sink. 0 means 4096.
	MaxApplyEvents int
	// DialBackoffMin and DialBackoffMax bound the wait before a listener
	// redials its endpoint after a failed dial or a lost connection; the
	// wait doubles from Min up to Max, less up to half of it (jitter). A
	// listener's first dial, and its first redial after a connection that
	// delivered a message, wait Min at most. 0 means 50ms and 5s.
	DialBackoffMin, DialBackoffMax time.Duration
	// DialRate caps the redials per second of all listeners together
	// once their backoff has elapsed: a listener then waits for the next
	// free slot of the Ingress's dial pacer (a burst of one second's worth
	// passes at once). With few unreachable endpoints it never waits; with
	// more than DialRate x DialBackoffMax, each is retried about every
	// (unreachable ranks / DialRate) seconds instead of every
	// DialBackoffMax. 0 means 200 a second. BenchmarkRedialCPU, 2 shared
	// cores: 10,000 unreachable ranks redialed 2,779 times a second for
	// 19% of a core without pacing; paced, 200 a second cost 4.6%.
	DialRate int
	// ReplayTimeout bounds the dial of a replay endpoint and each read of
	// a replay reply; a replay that times out ends and live processing
	// resumes. 0 means 5s.
	ReplayTimeout time.Duration
	// MaxFrameSize is the largest ZMTP frame a listener accepts, and
	// MaxMessageSize the largest message (its frames together; a live
	// message also has at most 3 frames, a replay reply 4). A peer that
	// breaks a limit loses its connection at the header of the frame that
	// breaks it, before anything is allocated for that frame (counted in
	// RecvErrors and by reason, e.g. TooManyFrames), and is redialed after
	// the dial backoff. Each listener holds at most one message it is
	// reading. 0 means 64 MiB for both.
	MaxFrameSize, MaxMessageSize int
}

// Frames per message: a live KV event message is [topic, seq, payload]; a
// replay reply ["", seq, payload] or ["", topic, seq, payload].
const (
	liveFrames   = 3
	replayFrames = 4
)

func (in *Ingress) liveLimits() Limits {
	return Limits{MaxFrames: liveFrames, MaxFrameSize: in.cfg.MaxFrameSize, MaxMessageSize: in.cfg.MaxMessageSize}
}

func (in *Ingress) replayLimits() Limits {
	return Limits{MaxFrames: replayFrames, MaxFrameSize: in.cfg.MaxFrameSize, MaxMessageSize: in.cfg.MaxMessageSize}
}

// nextBackoff returns the wait before the dial after one that waited b:
// DialBackoffMin after none, then doubling up to DialBackoffMax.
func (in *Ingress) nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return in.cfg.DialBackoffMin
	}
	return min(2*b, in.cfg.DialBackoffMax)
}

// reserve adds n to c unless that would take it above limit.
func reserve(c *atomic.Int64, n, limit int64) bool {
	for {
		cur := c.Load()
		if cur+n > limit {
			return false
		}
		if c.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// dialPacer spaces the redials of all listeners to at most rate a second:
// a virtual schedule of slots interval apart, next being the first free
// one, which may lag up to burst behind now (so that an idle pacer lets
// one second's worth through at once). Times are nanoseconds on the
// monotonic clock since start; reserve takes the time as an input.
type dialPacer struct {
	start    time.Time
	interval int64
	burst    int64
	next     atomic.Int64
}

func (p *dialPacer) init(rate int) {
	p.start = time.Now()
	p.interval = int64(time.Second) / int64(rate)
	p.burst = int64(time.Second) - p.interval // rate slots up to now
	p.next.Store(-p.burst)
}

func (p *dialPacer) now() int64 { return int64(time.Since(p.start)) }

// reserve takes the first free slot at or after now and returns how long
// until it comes (0 or less: at once).
func (p *dialPacer) reserve(now int64) time.Duration {
	for {
		n := p.next.Load()
		slot := max(n, now-p.burst)
		if p.next.CompareAndSwap(n, slot+p.interval) {
			return time.Duration(slot - now)
		}
	}
}

// countLimit counts a connection dropped for breaking its Limits.
func (in *Ingress) countLimit(err error) {
	switch {
	case errors.Is(err, ErrTooManyFrames):
		in.st.tooManyFrames.Add(1)
	case errors.Is(err, ErrMessageTooLarge):
		in.st.messageTooLarge.Add(1)
	case errors.Is(err, ErrFrameTooLarge):
		in.st.frameTooLarge.Add(1)
	}
}

// DefaultWriters is the writer count used when Config.Writers is 0: one per
// two procs, at least one, like radix.DefaultShards. A CPU profile of
// BenchmarkEndToEnd (4-block batches, 2 procs) puts the writers' index
// work at about 13% of the CPU against 11% for reading frames and 12% for
// decoding, so writers are not the bottleneck of one rank; more writers
// only spread many workers.
func DefaultWriters() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	if c.Writers < 0 || c.Writers > 1024 || c.QueueLimit < 0 || c.WriterQueue < 0 || c.MaxApplyEvents < 0 || c.MaxFrameSize < 0 || c.MaxMessageSize < 0 {
		return fmt.Errorf("zmqin: invalid config: negative or huge count in %+v", c)
	}
	if c.DialBackoffMin < 0 || c.DialBackoffMax < 0 || c.ReplayTimeout < 0 || c.DialRate < 0 {
		return fmt.Errorf("zmqin: invalid config: negative duration in %+v", c)
	}
	if c.DialBackoffMax != 0 && c.DialBackoffMin > c.DialBackoffMax {
		return fmt.Errorf("zmqin: invalid config: DialBackoffMin %v > DialBackoffMax %v", c.DialBackoffMin, c.DialBackoffMax)
	}
	if c.MaxQueueBytes < 0 || c.MaxTotalQueueBytes < 0 {
		return fmt.Errorf("zmqin: invalid config: negative queue bytes in %+v", c)
	}
	if d := c.withDefaults(); d.MaxQueueBytes < d.MaxMessageSize || d.MaxTotalQueueBytes < d.MaxQueueBytes {
		return fmt.Errorf("zmqin: invalid config: need MaxMessageSize %d <= MaxQueueBytes %d <= MaxTotalQueueBytes %d",
			d.MaxMessageSize, d.MaxQueueBytes, d.MaxTotalQueueBytes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Writers == 0 {
		c.Writers = DefaultWriters()
	}
	if c.QueueLimit == 0 {
		c.QueueLimit = 1024
	}
	if c.WriterQueue == 0 {
		c.WriterQueue = 256
	}
	if c.MaxApplyEvents == 0 {
		c.MaxApplyEvents = 4096
	}
	if c.DialBackoffMin == 0 {
		c.DialBackoffMin = 50 * time.Millisecond
	}
	if c.DialBackoffMax == 0 {
		c.DialBackoffMax = 5 * time.Second
	}
	if c.DialBackoffMax < c.DialBackoffMin {
		c.DialBackoffMax = c.DialBackoffMin
	}
	if c.DialRate == 0 {
		c.DialRate = 200
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = 5 * time.Second
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = 64 << 20
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 64 << 20
	}
	if c.MaxQueueBytes == 0 {
		c.MaxQueueBytes = 64 << 20
	}
	if c.MaxTotalQueueBytes == 0 {
		c.MaxTotalQueueBytes = 256 << 20
	}
	return c
}

// Stats is a snapshot of an Ingress's counters, cumulative since New
// (gauges say so). Cheap: atomics only.
type Stats struct {
	Ranks     int // rank listeners running (gauge)
	Connected int // rank listeners with a live SUB connection (gauge)

	BatchesApplied uint64 // wire batches whose events reached a sink
	EventsApplied  uint64 // events passed to sinks

	// Drops by reason. BadFrames: messages that are not [topic, seq(8),
	// payload]. Overflow: messages dropped at a full rank queue. Stale:
	// batches with seq <= the watermark. DecodeErrors: payloads rejected
	// as malformed (the watermark does not move). Events counts the
	// events skipped inside decoded batches, by DropReason.
	BadFrames    uint64
	Overflow     uint64
	Stale        uint64
	DecodeErrors uint64
	Events       DropCounts

	Gaps            uint64 // seq > watermark+1 (or a first seq > 0)
	MissedBatches   uint64 // sum of the gaps' sizes, before replay
	Replays         uint64 // replay requests sent
	ReplayedBatches uint64 // batches applied from replay answers
	ReplayFailures  uint64 // replays that could not complete (dial, timeout, bad reply)
	ReplayLost      uint64 // replays whose answer started after the requested seq (history gone)
	Restarts        uint64 // publisher restarts detected (rank cleared, watermark reset)

	Connects   uint64 // successful connections (first and re-)
	DialErrors uint64 // failed dials or handshakes
	RecvErrors uint64 // connections lost while receiving (any reason)

	// Connections (live or replay) dropped because the peer broke a limit
	// (see Limits), by reason: a message of more frames than its protocol
	// has, a message over MaxMessageSize, a frame over MaxFrameSize.
	TooManyFrames   uint64
	MessageTooLarge uint64
	FrameTooLarge   uint64

	// QueueDepth is the messages queued over all ranks, those being
	// handled included (gauge); one rank's is at most QueueLimit.
	QueueDepth int
	QueueLimit int // per-rank queue limit (Config.QueueLimit)
	// QueueBytes is the payload bytes queued over all ranks, the
	// messages being handled included (gauge): at most
	// QueueBytesLimitTotal, one rank's at most QueueBytesLimit.
	QueueBytes           int64
	QueueBytesLimit      int64 // Config.MaxQueueBytes
	QueueBytesLimitTotal int64 // Config.MaxTotalQueueBytes
}

// stats are the Ingress's counters, written by every goroutine with atomic
// adds.
type stats struct {
	batchesApplied, eventsApplied                        atomic.Uint64
	badFrames, overflow, stale, decodeErrors             atomic.Uint64
	events                                               [numDropReasons]atomic.Uint64
	gaps, missed                                         atomic.Uint64
	replays, replayedBatches, replayFailures, replayLost atomic.Uint64
	restarts                                             atomic.Uint64
	connects, dialErrors, recvErrors                     atomic.Uint64
	tooManyFrames, messageTooLarge, frameTooLarge        atomic.Uint64

	// Gauges. ranks and connected count listeners and live connections.
	// queuedMsgs and queuedBytes are the messages in every rank's queue,
	// those being handled included, and their payload bytes: counted by a
	// reader before it queues a message (queuedBytes never above
	// MaxTotalQueueBytes), uncounted once its listener is done with it.
	ranks, connected        atomic.Int64
	queuedMsgs, queuedBytes atomic.Int64
}

// Ingress is the ZeroMQ implementation of core.Ingress: one supervised SUB
// listener per (worker, rank), sticky writer goroutines, sequence
// watermarks, replay and restart detection. See the package doc for the
// contract and the goroutine inventory.
type Ingress struct {
	cfg     Config
	writers []*writer
	wg      sync.WaitGroup // writer goroutines

	// syncMu serialises Sync, Detach and Close, which stop listeners
	// synchronously; it is never taken by Status or Stats.
	syncMu sync.Mutex

	mu struct {
		sync.RWMutex
		// workers is the attached workers. A workerState's fields are
		// replaced only under syncMu and mu; read under mu.
		workers map[uint64]*workerState
		closed  bool
	}

	st    stats
	pacer dialPacer
}

var _ core.Ingress = (*Ingress)(nil)

type workerState struct {
	sink      core.EventSink
	blockSize int
	ranks     map[uint32]*rankListener
}

// New starts an Ingress's writer goroutines.
func New(cfg Config) (*Ingress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	in := &Ingress{cfg: cfg}
	in.pacer.init(cfg.DialRate)
	in.mu.workers = make(map[uint64]*workerState)
	in.writers = make([]*writer, cfg.Writers)
	for i := range in.writers {
		w := &writer{in: in, q: make(chan wItem, cfg.WriterQueue)}
		in.writers[i] = w
		in.wg.Add(1)
		go w.run()
	}
	return in, nil
}

func (in *Ingress) writerFor(workerID uint64) *writer {
	return in.writers[(workerID*0x9E3779B97F4A7C15)>>32%uint64(len(in.writers))]
}

// Sync implements core.Ingress. Reconciliation, rank by rank: a rank whose
// endpoint and effective replay endpoint are unchanged keeps its listener
// (watermark, decoder state and blocks); a changed rank's listener is
// stopped, its blocks cleared through the old sink, and a fresh listener
// started; a rank no longer listed is stopped and cleared. A different sink
// or block size stops and clears every old rank (through the old sink) and
// starts fresh ones. The replay endpoint is honoured only when ranks has
// exactly one entry (data_parallel_size 1); otherwise it is ignored. sink
// must be comparable (a pointer). blockSize must be positive.
//
// Sync returns once the old listeners have stopped; their clears are queued
// on the worker's writer ahead of any event of the new listeners.
func (in *Ingress) Sync(workerID uint64, blockSize int, ranks []core.RankSource, sink core.EventSink) {
	if blockSize <= 0 {
		panic(fmt.Sprintf("zmqin: Sync of worker %d with block size %d", workerID, blockSize))
	}
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.RLock()
	closed := in.mu.closed
	old := in.mu.workers[workerID]
	in.mu.RUnlock()
	if closed {
		return
	}
	want := make(map[uint32]core.RankSource, len(ranks))
	for _, r := range ranks {
		if len(ranks) != 1 {
			r.ReplayEndpoint = ""
		}
		want[r.DPRank] = r
	}
	w := in.writerFor(workerID)
	next := &workerState{sink: sink, blockSize: blockSize, ranks: make(map[uint32]*rankListener, len(want))}
	var stop []*rankListener
	if old != nil {
		moved := old.sink != sink || old.blockSize != blockSize
		for rank, l := range old.ranks {
			if src, ok := want[rank]; ok && !moved && src == l.src {
				next.ranks[rank] = l
			} else {
				stop = append(stop, l)
			}
		}
	}
	for _, l := range stop {
		l.stop()
		w.enqueue(wItem{op: opClear, sink: l.sink, key: l.key})
	}
	for rank, src := range want {
		if next.ranks[rank] == nil {
			next.ranks[rank] = in.startRank(workerID, blockSize, src, sink, w)
		}
	}
	in.mu.Lock()
	if len(next.ranks) == 0 {
		delete(in.mu.workers, workerID)
	} else {
		in.mu.workers[workerID] = next
	}
	in.mu.Unlock()
}

// Detach implements core.Ingress: it stops every listener of the worker,
// then waits until the worker's writer has applied everything queued before
// the stop, so that no event of the worker reaches its sink afterwards.
func (in *Ingress) Detach(workerID uint64) {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.Lock()
	ws := in.mu.workers[workerID]
	delete(in.mu.workers, workerID)
	closed := in.mu.closed
	in.mu.Unlock()
	if ws == nil || closed {
		return
	}
	for _, l := range ws.ranks {
		l.stop()
	}
	in.writerFor(workerID).barrier()
}

// Status implements core.Ingress.
func (in *Ingress) Status(workerID uint64, dst []core.RankStatus) []core.RankStatus {
	in.mu.RLock()
	ws := in.mu.workers[workerID]
	var ls []*rankListener
	if ws != nil {
		ls = make([]*rankListener, 0, len(ws.ranks))
		for _, l := range ws.ranks {
			ls = append(ls, l)
		}
	}
	in.mu.RUnlock()
	slices.SortFunc(ls, func(a, b *rankListener) int { return int(a.key.DPRank) - int(b.key.DPRank) })
	for _, l := range ls {
		dst = append(dst, l.status())
	}
	return dst
}

// Stats returns a snapshot of the counters.
func (in *Ingress) Stats() Stats {
	s := &in.st
	out := Stats{
		Ranks:           int(s.ranks.Load()),
		Connected:       int(s.connected.Load()),
		BatchesApplied:  s.batchesApplied.Load(),
		EventsApplied:   s.eventsApplied.Load(),
		BadFrames:       s.badFrames.Load(),
		Overflow:        s.overflow.Load(),
		Stale:           s.stale.Load(),
		DecodeErrors:    s.decodeErrors.Load(),
		Gaps:            s.gaps.Load(),
		MissedBatches:   s.missed.Load(),
		Replays:         s.replays.Load(),
		ReplayedBatches: s.replayedBatches.Load(),
		ReplayFailures:  s.replayFailures.Load(),
		ReplayLost:      s.replayLost.Load(),
		Restarts:        s.restarts.Load(),
		Connects:        s.connects.Load(),
		DialErrors:      s.dialErrors.Load(),
		RecvErrors:      s.recvErrors.Load(),
		TooManyFrames:   s.tooManyFrames.Load(),
		MessageTooLarge: s.messageTooLarge.Load(),
		FrameTooLarge:   s.frameTooLarge.Load(),
		QueueDepth:      int(s.queuedMsgs.Load()),
		QueueLimit:      in.cfg.QueueLimit,

		QueueBytes:           s.queuedBytes.Load(),
		QueueBytesLimit:      int64(in.cfg.MaxQueueBytes),
		QueueBytesLimitTotal: int64(in.cfg.MaxTotalQueueBytes),
	}
	for i := range s.events {
		out.Events[i] = s.events[i].Load()
	}
	return out
}

// Close implements core.Ingress: it stops every listener and writer and
// returns when all of the Ingress's goroutines have exited. Events still
// queued for writers are applied first.
func (in *Ingress) Close() error {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.Lock()
	if in.mu.closed {
		in.mu.Unlock()
		return nil
	}
	in.mu.closed = true
	workers := in.mu.workers
	in.mu.workers = make(map[uint64]*workerState)
	in.mu.Unlock()
	for _, ws := range workers {
		for _, l := range ws.ranks {
			l.stop()
		}
	}
	for _, w := range in.writers {
		close(w.q)
	}
	in.wg.Wait()
	return nil
}

// wItem is one unit of a writer's work.
type wItem struct {
	op   uint8
	sink core.EventSink
	buf  *evBuf          // opEvents: the batch's events; released after apply
	key  radix.WorkerKey // opClear: the rank to clear
	done chan struct{}   // opBarrier: closed when reached
}

const (
	opEvents uint8 = iota
	opClear
	opBarrier
)

// writer applies the decoded batches of the workers mapped to it, in queue
// order. Its goroutine is the only caller of its workers' sinks, which is
// what makes "events of one worker arrive from one goroutine at a time"
// (core.EventSink) hold.
type writer struct {
	in *Ingress
	q  chan wItem // closed by Ingress.Close after every listener stopped

	// scratch and pending are owned by the writer goroutine.
	scratch []radix.Event
	pending []*evBuf
}

func (w *writer) enqueue(it wItem) { w.q <- it }

// barrier returns when every item queued before it has been handled.
func (w *writer) barrier() {
	done := make(chan struct{})
	w.q <- wItem{op: opBarrier, done: done}
	<-done
}

func (w *writer) run() {
	defer w.in.wg.Done()
	var next *wItem
	for {
		var it wItem
		if next != nil {
			it, next = *next, nil
		} else {
			var ok bool
			if it, ok = <-w.q; !ok {
				return
			}
		}
		switch it.op {
		case opClear:
			it.sink.ClearRank(it.key)
		case opBarrier:
			close(it.done)
		case opEvents:
			// Coalesce the batches already queued for the same sink into
			// one ApplyBatch call, up to MaxApplyEvents: one shard lock
			// per run instead of one per wire batch.
			w.scratch = append(w.scratch[:0], it.buf.evs...)
			w.pending = append(w.pending[:0], it.buf)
		more:
			for len(w.scratch) < w.in.cfg.MaxApplyEvents {
				select {
				case n, ok := <-w.q:
					if !ok {
						break more
					}
					if n.op != opEvents || n.sink != it.sink {
						next = &n
						break more
					}
					w.scratch = append(w.scratch, n.buf.evs...)
					w.pending = append(w.pending, n.buf)
				default:
					break more
				}
			}
			it.sink.ApplyBatch(w.scratch)
			w.in.st.batchesApplied.Add(uint64(len(w.pending)))
			w.in.st.eventsApplied.Add(uint64(len(w.scratch)))
			clear(w.scratch)
			for i, b := range w.pending {
				putEvBuf(b)
				w.pending[i] = nil
			}
		}
	}
}

// evBuf owns a copy of one decoded batch's events: evs[i].Blocks and
// evs[i].Hashes point into blocks and hashes.
type evBuf struct {
	evs    []radix.Event
	blocks []radix.Block
	hashes []uint64
}

var evBufPool = sync.Pool{New: func() any { return new(evBuf) }}

// copyEvents returns a pooled evBuf holding a deep copy of evs (which alias
// a Decoder's memory). The writer releases it after applying.
func copyEvents(evs []radix.Event) *evBuf {
	b := evBufPool.Get().(*evBuf)
	nb, nh := 0, 0
	for i := range evs {
		nb += len(evs[i].Blocks)
		nh += len(evs[i].Hashes)
	}
	b.blocks = slices.Grow(b.blocks[:0], nb)
	b.hashes = slices.Grow(b.hashes[:0], nh)
	b.evs = append(b.evs[:0], evs...)
	for i := range b.evs {
		e := &b.evs[i]
		if e.Blocks != nil {
			lo := len(b.blocks)
			b.blocks = append(b.blocks, e.Blocks...)
			e.Blocks = b.blocks[lo:len(b.blocks):len(b.blocks)]
		}
		if e.Hashes != nil {
			lo := len(b.hashes)
			b.hashes = append(b.hashes, e.Hashes...)
			e.Hashes = b.hashes[lo:len(b.hashes):len(b.hashes)]
		}
	}
	return b
}

func putEvBuf(b *evBuf) {
	clear(b.evs)
	b.evs = b.evs[:0]
	if b.retained() <= maxPooledEvBytes {
		evBufPool.Put(b)
	}
}

// maxPooledEvBytes bounds what a pooled evBuf keeps between batches: a
// batch copied from a huge message (MaxFrameSize allows 64 MiB) is dropped
// after use instead of pinning its memory in the pool. 1 MiB holds about
// 64 Ki blocks, far beyond a vLLM step's batch.
const maxPooledEvBytes = 1 << 20

// retained is the memory b keeps for its next use.
func (b *evBuf) retained() int {
	return cap(b.evs)*int(unsafe.Sizeof(radix.Event{})) + cap(b.blocks)*int(unsafe.Sizeof(radix.Block{})) + 8*cap(b.hashes)
}
