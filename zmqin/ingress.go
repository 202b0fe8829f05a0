package zmqin

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/zmtp"
	"golang.org/x/sync/semaphore"
)

// countLimit counts a connection dropped for breaking its Limits.
func (in *Ingress) countLimit(err error) {
	switch {
	case errors.Is(err, zmtp.ErrTooManyFrames):
		in.st.tooManyFrames.Add(1)
	case errors.Is(err, zmtp.ErrMessageTooLarge):
		in.st.messageTooLarge.Add(1)
	case errors.Is(err, zmtp.ErrFrameTooLarge):
		in.st.frameTooLarge.Add(1)
	}
}

// Stats is a snapshot of an Ingress's counters, cumulative since New
// (gauges say so). Cheap: atomics only.
type Stats struct {
	Ranks     int // rank listeners running (gauge)
	Connected int // rank listeners with a live SUB connection (gauge)

	BatchesApplied uint64 // wire batches whose events reached a sink
	EventsApplied  uint64 // events passed to sinks

	// Drops by reason. BadFrames: messages that are not [topic, seq(8),
	// payload]. ExtraFrames: messages of more than 3 frames, read to their
	// end and skipped with the connection kept (ErrExtraFrames). Overflow: messages dropped at a full rank queue. Stale:
	// batches with seq <= the watermark. DecodeErrors: payloads rejected
	// as malformed (the watermark does not move). Events counts the
	// events skipped inside decoded batches, by DropReason.
	BadFrames    uint64
	ExtraFrames  uint64
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
	// has past Limits.HardFrames, a message over MaxMessageSize, a frame
	// over MaxFrameSize.
	TooManyFrames   uint64
	MessageTooLarge uint64
	FrameTooLarge   uint64

	// LogsSuppressed counts log lines the listeners' rate limits dropped.
	LogsSuppressed uint64

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
	// WriterQueueBytes is the memory of the decoded batches the writers
	// hold, queued or being applied (gauge); one writer's is at most
	// WriterQueueBytesLimit, or one batch when that batch alone is larger.
	WriterQueueBytes      int64
	WriterQueueBytesLimit int64 // Config.MaxWriterQueueBytes, per writer
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
	extraFrames                                          atomic.Uint64
	logsSuppressed                                       atomic.Uint64

	// Gauges. ranks and connected count listeners and live connections.
	// queuedMsgs and queuedBytes are the messages in every rank's queue,
	// those being handled included, and their payload bytes: counted by a
	// reader before it queues a message (queuedBytes never above
	// MaxTotalQueueBytes), uncounted once its listener is done with it.
	ranks, connected        atomic.Int64
	queuedMsgs, queuedBytes atomic.Int64
	// writerBytes is the sum of the writers' held bytes (writer.held).
	writerBytes atomic.Int64
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
		w := &writer{in: in, q: make(chan wItem, cfg.WriterQueue), room: semaphore.NewWeighted(int64(cfg.MaxWriterQueueBytes))}
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
		ExtraFrames:     s.extraFrames.Load(),
		MessageTooLarge: s.messageTooLarge.Load(),
		FrameTooLarge:   s.frameTooLarge.Load(),
		LogsSuppressed:  s.logsSuppressed.Load(),
		QueueDepth:      int(s.queuedMsgs.Load()),
		QueueLimit:      in.cfg.QueueLimit,

		QueueBytes:           s.queuedBytes.Load(),
		QueueBytesLimit:      int64(in.cfg.MaxQueueBytes),
		QueueBytesLimitTotal: int64(in.cfg.MaxTotalQueueBytes),

		WriterQueueBytes:      s.writerBytes.Load(),
		WriterQueueBytesLimit: int64(in.cfg.MaxWriterQueueBytes),
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

// ErrNoListener: Pause or Resume of a (worker, rank) that has no listener.
var ErrNoListener = errors.New("zmqin: no listener for that worker rank")

// ListenerStateError: Pause of a listener that is not running, or Resume of
// one that is not paused; State is the state it was in (RankStatus.State).
type ListenerStateError struct{ State string }

func (e *ListenerStateError) Error() string { return "zmqin: listener is " + e.State }

// ListenerState is the state the listener was in (for core's messages).
func (e *ListenerStateError) ListenerState() string { return e.State }

// Pause stops the listener of (workerID, rank) without forgetting it: its
// connection is closed and it stays paused, its watermark kept, until
// Resume; what the publisher sends meanwhile is missed, and resuming
// finds the gap (and replays it, with a replay endpoint). It implements
// core.ListenerControl, for the standalone indexer's test routes.
func (in *Ingress) Pause(workerID uint64, rank uint32) error {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	l, err := in.rank(workerID, rank)
	if err != nil {
		return err
	}
	if st, ok := l.pause(); !ok {
		return &ListenerStateError{State: st}
	}
	l.lg.LogAt(slog.LevelInfo, "kv listener paused")
	return nil
}

// Resume starts a paused listener again (see Pause).
func (in *Ingress) Resume(workerID uint64, rank uint32) error {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	l, err := in.rank(workerID, rank)
	if err != nil {
		return err
	}
	if st, ok := l.resume(); !ok {
		return &ListenerStateError{State: st}
	}
	l.lg.LogAt(slog.LevelInfo, "kv listener resumed")
	return nil
}

// rank returns the listener of (workerID, rank). The caller holds
// syncMu, so no Sync or Detach stops it meanwhile.
func (in *Ingress) rank(workerID uint64, rank uint32) (*rankListener, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	ws := in.mu.workers[workerID]
	if ws == nil || ws.ranks[rank] == nil {
		return nil, ErrNoListener
	}
	return ws.ranks[rank], nil
}
