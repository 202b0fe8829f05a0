package zmqin

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/budget"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// queued is one live message handed from a connection's reader to the
// rank's goroutine.
type queued struct {
	seq     uint64
	payload []byte
}

// rankListener is the listener of one (worker, rank). Its goroutine (run)
// dials the SUB endpoint, retrying with a capped, paced backoff; once
// connected it starts a reader goroutine for that connection (receive,
// frame check, bounded queue) and processes the connection's messages
// itself (sequence.go: restart and gap rules, replay over DEALER, decode,
// hand-off to the worker's writer) until the reader ends; then it
// finishes what was queued, drops the connection's buffers and dials
// again. So a rank that is not connected costs one goroutine and no
// buffer (BenchmarkRegisterRanks, TestUnconnectedRankCost).
type rankListener struct {
	in     *Ingress
	key    radix.WorkerKey
	src    core.RankSource // as given to Sync, ReplayEndpoint cleared unless honoured
	sink   core.EventSink
	w      *writer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu struct {
		sync.Mutex
		conn      *zmtp.Conn // the live SUB connection, for stop to close
		connected bool       // a connection's reader is running
		replaying bool       // run: a replay is in progress
		stopped   bool
		// paused: run was ended by pause and not started again; the
		// watermark and decoder state stay for resume. ctx, cancel and
		// done are replaced by resume, under mu.
		paused  bool
		lastErr string
	}

	// The published watermark: written by run after each consumed batch,
	// read by Status. wmPlus1 is the watermark plus one, 0 for none, in
	// one word so that a reader never pairs a seq with the wrong "has"
	// (the end marker 0xff..ff never is a batch seq, so seq+1 does not
	// wrap).
	wmPlus1 atomic.Uint64

	batches, gaps, replays, restarts atomic.Uint64

	// qMsgs and qBytes are the messages of the current connection's
	// queue, including the one run is handling, and their payload bytes:
	// reserved by the reader before queueing (at most QueueLimit and
	// MaxQueueBytes), released by run when done with a message, whether
	// handled or discarded.
	qMsgs, qBytes atomic.Int64

	// Owned by run. dec keeps its learned group kinds across
	// connections; its scratch is dropped with each connection.
	dec      *Decoder
	last     uint64 // watermark: the last seq consumed (applied, or rejected as undecodable)
	has      bool   // false before the first batch and after a restart
	lastHash uint64 // maphash of the payload consumed at last (rule 2)
	// nextEventID numbers the events handed to the writer.
	nextEventID uint64
	seed        maphash.Seed
	// failing is set after a failed dial and cleared by a connection, so
	// that only the first failure of a series is a warning.
	failing bool
	// replayApplied counts the batches the current replay applied.
	replayApplied int

	// lg logs the rank's state changes, rate-limited (logging.go).
	lg ratelog.Logger
}

func (in *Ingress) startRank(workerID uint64, blockSize int, src core.RankSource, sink core.EventSink, w *writer) *rankListener {
	l := &rankListener{
		in:   in,
		key:  radix.WorkerKey{WorkerID: workerID, DPRank: src.DPRank},
		src:  src,
		sink: sink,
		w:    w,
		done: make(chan struct{}),
		dec:  NewDecoder(blockSize),
		seed: maphash.MakeSeed(),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.lg = ratelog.Logger{
		Log:   in.cfg.Logger.With("worker_id", workerID, "dp_rank", src.DPRank, "endpoint", src.Endpoint),
		Burst: in.cfg.LogBurst, Every: in.cfg.LogEvery,
		Dropped: func() { in.st.logsSuppressed.Add(1) },
	}
	in.st.ranks.Add(1)
	go l.run()
	return l
}

// stop ends the listener's goroutines and returns when they have exited.
// Events already handed to the writer may still be queued there.
func (l *rankListener) stop() {
	l.mu.Lock()
	l.mu.stopped = true
	done := l.haltLocked()
	l.mu.Unlock()
	<-done
	l.in.st.ranks.Add(-1)
}

// haltLocked cancels run and closes its connection; it returns the channel
// closed once run has exited. Under l.mu.
func (l *rankListener) haltLocked() <-chan struct{} {
	l.cancel()
	if l.mu.conn != nil {
		_ = l.mu.conn.Close()
	}
	return l.done
}

// pause ends run (and its connection) but keeps the listener, its
// watermark and decoder state, for resume; it returns when run has
// exited. It reports the state it found and false when the listener was
// not running (already paused or stopped).
func (l *rankListener) pause() (string, bool) {
	l.mu.Lock()
	if l.mu.stopped || l.mu.paused {
		defer l.mu.Unlock()
		return l.stateLocked(), false
	}
	l.mu.paused = true
	done := l.haltLocked()
	l.mu.Unlock()
	<-done
	return "", true
}

// resume starts run again on a paused listener: it dials, and the kept
// watermark turns what was published meanwhile into a gap (replayed when
// the rank has a replay endpoint). It reports the state it found and
// false when the listener was not paused.
func (l *rankListener) resume() (string, bool) {
	l.mu.Lock()
	if l.mu.stopped || !l.mu.paused {
		defer l.mu.Unlock()
		return l.stateLocked(), false
	}
	l.mu.paused = false
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.done = make(chan struct{})
	l.mu.lastErr = ""
	go l.run()
	l.mu.Unlock()
	return "", true
}

// watermark returns the published watermark as a log value: the last seq
// consumed, or "none".
func (l *rankListener) watermark() any {
	if w := l.wmPlus1.Load(); w != 0 {
		return w - 1
	}
	return "none"
}

func (l *rankListener) setErr(err error) {
	l.mu.Lock()
	l.mu.lastErr = err.Error()
	l.mu.Unlock()
}

func (l *rankListener) status() core.RankStatus {
	wmPlus1 := l.wmPlus1.Load()
	st := core.RankStatus{
		DPRank:   l.key.DPRank,
		Endpoint: l.src.Endpoint,
		LastSeq:  max(wmPlus1, 1) - 1,
		HasSeq:   wmPlus1 != 0,
		Batches:  l.batches.Load(),
		Gaps:     l.gaps.Load(),
		Replays:  l.replays.Load(),
		Restarts: l.restarts.Load(),
	}
	l.mu.Lock()
	st.State = l.stateLocked()
	st.LastError = l.mu.lastErr
	l.mu.Unlock()
	return st
}

// stateLocked is the listener's state (RankStatus.State). Under l.mu.
func (l *rankListener) stateLocked() string {
	switch {
	case l.mu.stopped:
		return "stopped"
	case l.mu.paused:
		return "paused"
	case l.mu.replaying:
		return "replaying"
	case l.mu.connected:
		return "live"
	}
	return "connecting"
}

// run is the rank's goroutine: dial, serve the connection, repeat until
// the listener stops.
func (l *rankListener) run() {
	defer close(l.done)
	// backoff is the wait before the next dial: none for the first,
	// growing over failed dials and over connections that ended without
	// delivering a message (a peer that accepts and then breaks the
	// limits is retried no faster than one that refuses), back to
	// DialBackoffMin after a connection that delivered one. Only the
	// waits after a failure are paced: a first dial, or a redial after a
	// connection that worked, is one per listener per event.
	var backoff time.Duration
	paced := false
	for l.ctx.Err() == nil {
		if backoff > 0 && !l.wait(backoff, paced) {
			return
		}
		paced = true
		zc, err := zmtp.Dial(l.ctx, l.src.Endpoint, zmtp.Sub, l.in.liveLimits())
		if err == nil {
			// ZMTP 3.0 subscription message: 1 then the topic ("" = all).
			if err = zc.Send([]byte{1}); err != nil {
				_ = zc.Close()
			}
		}
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			l.in.st.dialErrors.Add(1)
			l.setErr(fmt.Errorf("dial %s: %w", l.src.Endpoint, err))
			if !l.failing {
				l.failing = true
				l.lg.LogAt(slog.LevelWarn, "kv listener cannot connect; retrying with backoff", "err", err)
			} else {
				l.lg.LogAt(slog.LevelDebug, "kv listener dial failed", "err", err)
			}
			backoff = l.in.nextBackoff(backoff)
			continue
		}
		l.failing = false
		delivered, err := l.serve(zc)
		if l.ctx.Err() != nil {
			return
		}
		// The error first: whoever sees the counters move sees it.
		l.setErr(fmt.Errorf("receive from %s: %w", l.src.Endpoint, err))
		l.in.st.recvErrors.Add(1)
		l.in.countLimit(err)
		l.lg.LogAt(slog.LevelWarn, "kv listener disconnected; redialing", "err", err, "delivered", delivered)
		if delivered {
			backoff, paced = 0, false
		}
		backoff = l.in.nextBackoff(backoff)
	}
}

// wait sleeps d less up to half of it (jitter, so that the listeners of a
// restarted fleet do not dial in lockstep), then, if paced, until the
// Ingress's dial pacer gives it a slot; false if the listener stopped
// meanwhile.
func (l *rankListener) wait(d time.Duration, paced bool) bool {
	t := time.NewTimer(d - time.Duration(rand.Int64N(int64(d)/2+1)))
	defer t.Stop()
	for slotted := false; ; slotted = true {
		select {
		case <-l.ctx.Done():
			return false
		case <-t.C:
		}
		if !paced || slotted {
			return true
		}
		if slot := l.in.pacer.reserve(l.in.pacer.now()); slot > 0 {
			t.Reset(slot)
		} else {
			return true
		}
	}
}

// serve runs one connection: a reader goroutine receives into a queue made
// for the connection, while this goroutine processes it; it returns when
// the connection has ended and everything queued on it is consumed (or
// discarded, once the listener stops), with the reader's error and
// whether the connection delivered a well-formed message. The rule 1
// reference follows from this order: every seq consumed before the first
// message of this connection came from earlier connections, so was
// published before this subscription.
func (l *rankListener) serve(zc *zmtp.Conn) (delivered bool, err error) {
	l.mu.Lock()
	if l.mu.stopped || l.mu.paused {
		// stop or pause came between the dial and here: nothing would
		// close this connection for them.
		l.mu.Unlock()
		_ = zc.Close()
		return false, context.Canceled
	}
	l.mu.conn, l.mu.connected = zc, true
	l.mu.Unlock()
	l.in.st.connects.Add(1)
	l.in.st.connected.Add(1)
	l.lg.LogAt(slog.LevelInfo, "kv listener connected", "watermark", l.watermark())
	q := make(chan queued, l.in.cfg.QueueLimit)
	go func() {
		delivered, err = l.receive(zc, q)
		_ = zc.Close()
		l.mu.Lock()
		l.mu.conn, l.mu.connected = nil, false
		l.mu.Unlock()
		l.in.st.connected.Add(-1)
		close(q) // last: serve reads delivered and err after q is drained
	}()
	first := true
	for m := range q {
		if l.ctx.Err() == nil {
			l.handle(m, first)
			first = false
		}
		l.release(int64(len(m.payload)))
	}
	l.dec.dropScratch()
	return delivered, err
}

// receive moves messages from zc into q until a receive error, and
// reports whether any message was a well-formed [topic, seq(8), payload].
// Other messages are counted and skipped; a message that does not fit in
// the queue is dropped and counted.
func (l *rankListener) receive(zc *zmtp.Conn, q chan<- queued) (delivered bool, err error) {
	var frames [][]byte
	for {
		frames, err = zc.Recv(frames)
		if errors.Is(err, zmtp.ErrExtraFrames) {
			l.in.st.extraFrames.Add(1)
			l.setErr(err)
			l.lg.LogAt(slog.LevelWarn, "kv message with extra frames; skipped, the connection stays up", "err", err)
			continue
		}
		if err != nil {
			return delivered, err
		}
		seq, payload, err := ParseFrames(frames)
		clear(frames)
		if err != nil {
			l.in.st.badFrames.Add(1)
			l.setErr(err)
			l.lg.LogAt(slog.LevelWarn, "kv message malformed; skipped", "err", err)
			continue
		}
		delivered = true
		if !l.admit(q, queued{seq: seq, payload: payload}) {
			l.in.st.overflow.Add(1)
			l.lg.LogAt(slog.LevelWarn, "kv listener queue full; message dropped (a gap follows)", "seq", seq)
		}
	}
}

// admit queues m if the rank's budgets (QueueLimit messages and
// MaxQueueBytes) and the ingress's (MaxTotalQueueBytes) have room for it.
// A message counts against them from here until run is done with it, so
// q, whose capacity is QueueLimit, always has room for an admitted one.
func (l *rankListener) admit(q chan<- queued, m queued) bool {
	n := int64(len(m.payload))
	if !budget.Reserve(&l.qMsgs, 1, int64(l.in.cfg.QueueLimit)) {
		return false
	}
	if !budget.Reserve(&l.qBytes, n, int64(l.in.cfg.MaxQueueBytes)) {
		l.qMsgs.Add(-1)
		return false
	}
	if !budget.Reserve(&l.in.st.queuedBytes, n, int64(l.in.cfg.MaxTotalQueueBytes)) {
		l.qMsgs.Add(-1)
		l.qBytes.Add(-n)
		return false
	}
	l.in.st.queuedMsgs.Add(1)
	select {
	case q <- m:
		return true
	default:
		panic("BUG: zmqin: a rank queue is full within its message budget")
	}
}

// release returns a message of n bytes that run is done with to the
// budgets.
func (l *rankListener) release(n int64) {
	l.qMsgs.Add(-1)
	l.qBytes.Add(-n)
	l.in.st.queuedMsgs.Add(-1)
	l.in.st.queuedBytes.Add(-n)
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
