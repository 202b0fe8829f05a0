package zmqin

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// queued is one live message handed from a rank's reader to its processor.
type queued struct {
	seq     uint64
	payload []byte
	// conn numbers the connection the message came on (1 for the first).
	conn uint64
	// wm and hasWM are the rank's published watermark just before that
	// connection was dialed: the reference for restart detection.
	wm    uint64
	hasWM bool
	// epoch is the processor's restart count when wm was taken: a
	// restart handled since makes wm a watermark of an older incarnation,
	// useless as a reference.
	epoch uint64
}

// rankListener is the listener of one (worker, rank): a reader goroutine
// that owns the SUB connection (dial with capped backoff, receive, frame
// check, bounded queue) and a processor goroutine that owns the sequence
// watermark and the Decoder (restart detection, gap detection, replay over
// DEALER, decode, hand-off to the worker's writer).
type rankListener struct {
	in     *Ingress
	key    radix.WorkerKey
	src    core.RankSource // as given to Sync, ReplayEndpoint cleared unless honoured
	sink   core.EventSink
	w      *writer
	q      chan queued // bounded by Config.QueueLimit
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the reader and the processor

	mu struct {
		sync.Mutex
		conn      *zconn // the live SUB connection, for stop to close
		connected bool   // reader: a connection is established
		replaying bool   // processor: a replay is in progress
		stopped   bool
		lastErr   string
		// epoch counts the restarts the processor has handled; it and
		// wmPlus1 change together under mu on a restart, so the reader
		// snapshots a watermark with the epoch it belongs to. Written by
		// the processor only (which may read it without mu).
		epoch uint64
	}

	// The published watermark: written by the processor after each
	// applied batch, read by Status and by the reader at connect time.
	// wmPlus1 is the watermark plus one, 0 for none, in one word so that
	// a reader never pairs a seq with the wrong "has" (the end marker
	// 0xff..ff never is a batch seq, so seq+1 does not wrap).
	wmPlus1 atomic.Uint64

	batches, gaps, replays, restarts atomic.Uint64

	// qBytes is the payload bytes in q (and in the processor's hands):
	// reserved by the reader before queueing, at most MaxQueueBytes,
	// released by the processor after handling a message, and by stop
	// for what is left.
	qBytes atomic.Int64

	// Owned by the processor goroutine.
	dec      *Decoder
	last     uint64 // watermark: the last seq consumed (applied, or rejected as undecodable)
	has      bool   // false before the first batch and after a restart
	lastConn uint64 // conn of the last processed message
	lastHash uint64 // maphash of the payload applied at last (rule 2)
	// nextEventID numbers the events handed to the writer.
	nextEventID uint64
	seed        maphash.Seed
}

func (in *Ingress) startRank(workerID uint64, blockSize int, src core.RankSource, sink core.EventSink, w *writer) *rankListener {
	l := &rankListener{
		in:   in,
		key:  radix.WorkerKey{WorkerID: workerID, DPRank: src.DPRank},
		src:  src,
		sink: sink,
		w:    w,
		q:    make(chan queued, in.cfg.QueueLimit),
		dec:  NewDecoder(blockSize),
		seed: maphash.MakeSeed(),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(2)
	go l.read()
	go l.process()
	return l
}

// stop ends both goroutines and returns when they have exited. Events the
// processor already handed to the writer may still be queued there.
func (l *rankListener) stop() {
	l.mu.Lock()
	l.mu.stopped = true
	l.cancel()
	if l.mu.conn != nil {
		_ = l.mu.conn.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	for len(l.q) > 0 {
		<-l.q
	}
	l.in.st.queuedBytes.Add(-l.qBytes.Swap(0))
}

func (l *rankListener) setErr(err error) {
	l.mu.Lock()
	l.mu.lastErr = err.Error()
	l.mu.Unlock()
}

func (l *rankListener) status() core.RankStatus {
	st := core.RankStatus{
		DPRank:   l.key.DPRank,
		Endpoint: l.src.Endpoint,
		LastSeq:  max(l.wmPlus1.Load(), 1) - 1,
		HasSeq:   l.wmPlus1.Load() != 0,
		Batches:  l.batches.Load(),
		Gaps:     l.gaps.Load(),
		Replays:  l.replays.Load(),
		Restarts: l.restarts.Load(),
	}
	l.mu.Lock()
	switch {
	case l.mu.stopped:
		st.State = "stopped"
	case l.mu.replaying:
		st.State = "replaying"
	case l.mu.connected:
		st.State = "live"
	default:
		st.State = "connecting"
	}
	st.LastError = l.mu.lastErr
	l.mu.Unlock()
	return st
}

// read is the reader goroutine: dial (retrying forever with capped
// exponential backoff), subscribe to every topic, receive into the queue;
// after any receive error the connection is dropped and a new one dialed.
func (l *rankListener) read() {
	defer l.wg.Done()
	// backoff is the wait before the next dial: none for the first,
	// growing over failed dials and over connections that ended without
	// delivering a message (a peer that accepts and then breaks the
	// limits is retried no faster than one that refuses), back to
	// DialBackoffMin after a connection that delivered one.
	var backoff time.Duration
	var conn uint64
	for l.ctx.Err() == nil {
		if backoff > 0 && !l.sleep(backoff) {
			return
		}
		// The restart rule's reference watermark is taken before the
		// connection exists: every seq in it was published before the
		// subscription, so the same publisher's first batch on this
		// connection is above it. (Taken after subscribing, a replay
		// running meanwhile could apply batches published after the
		// subscription and make a reconnect look like a restart.)
		l.mu.Lock()
		epoch, wmPlus1 := l.mu.epoch, l.wmPlus1.Load()
		l.mu.Unlock()
		zc, err := dialZMTP(l.ctx, l.src.Endpoint, zmq4.Sub, l.in.liveLimits())
		if err == nil {
			// ZMTP 3.0 subscription message: 1 then the topic ("" = all).
			err = zc.send([]byte{1})
			if err != nil {
				_ = zc.Close()
			}
		}
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			l.in.st.dialErrors.Add(1)
			l.setErr(fmt.Errorf("dial %s: %w", l.src.Endpoint, err))
			backoff = l.in.nextBackoff(backoff)
			continue
		}
		conn++
		l.mu.Lock()
		if l.mu.stopped {
			l.mu.Unlock()
			_ = zc.Close()
			return
		}
		l.mu.conn, l.mu.connected = zc, true
		l.mu.Unlock()
		l.in.st.connects.Add(1)
		delivered, err := l.receive(zc, queued{conn: conn, epoch: epoch, wm: max(wmPlus1, 1) - 1, hasWM: wmPlus1 != 0})
		_ = zc.Close()
		l.mu.Lock()
		l.mu.conn, l.mu.connected = nil, false
		l.mu.Unlock()
		if l.ctx.Err() != nil {
			return
		}
		l.in.st.recvErrors.Add(1)
		l.in.countLimit(err)
		l.setErr(fmt.Errorf("receive from %s: %w", l.src.Endpoint, err))
		if delivered {
			backoff = 0
		}
		backoff = l.in.nextBackoff(backoff)
	}
}

// sleep waits d less up to half of it (jitter, so that the listeners of a
// restarted fleet do not dial in lockstep); false if the listener stopped
// meanwhile.
func (l *rankListener) sleep(d time.Duration) bool {
	t := time.NewTimer(d - time.Duration(rand.Int64N(int64(d)/2+1)))
	defer t.Stop()
	select {
	case <-l.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// receive moves messages from zc into the queue until a receive error,
// and reports whether any message was a well-formed [topic, seq(8),
// payload]. Other messages are counted and skipped; a message arriving at
// a full queue is dropped and counted.
func (l *rankListener) receive(zc *zconn, tmpl queued) (delivered bool, err error) {
	var frames [][]byte
	for {
		frames, err = zc.recv(frames)
		if err != nil {
			return delivered, err
		}
		seq, payload, err := ParseFrames(frames)
		clear(frames)
		if err != nil {
			l.in.st.badFrames.Add(1)
			l.setErr(err)
			continue
		}
		delivered = true
		m := tmpl
		m.seq, m.payload = seq, payload
		if !l.admit(m) {
			l.in.st.overflow.Add(1)
		}
	}
}

// admit queues m if the rank's queue has room for it, in messages and in
// bytes, and the ingress in bytes.
func (l *rankListener) admit(m queued) bool {
	n := int64(len(m.payload))
	if !reserve(&l.qBytes, n, int64(l.in.cfg.MaxQueueBytes)) {
		return false
	}
	if !reserve(&l.in.st.queuedBytes, n, int64(l.in.cfg.MaxTotalQueueBytes)) {
		l.qBytes.Add(-n)
		return false
	}
	select {
	case l.q <- m:
		return true
	default:
		l.release(n)
		return false
	}
}

// release returns n queued bytes to the rank's and the ingress's budgets.
func (l *rankListener) release(n int64) {
	l.qBytes.Add(-n)
	l.in.st.queuedBytes.Add(-n)
}

// process is the processor goroutine.
func (l *rankListener) process() {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case m := <-l.q:
			l.handle(m)
			l.release(int64(len(m.payload)))
		}
	}
}

// handle applies the sequence rules to one live message (see the package
// doc, "Sequence numbers, replay and restarts").
func (l *rankListener) handle(m queued) {
	replay := l.src.ReplayEndpoint != ""
	// counted is set once rule 2 has counted the gap up to m.seq: what its
	// replay did not fill is still missing but must not be counted twice.
	counted := false
	if m.conn != l.lastConn {
		l.lastConn = m.conn
		switch {
		case l.has && m.hasWM && m.seq <= m.wm && m.epoch == l.mu.epoch:
			// Rule 1. The publisher sends a new subscriber only batches
			// published after it subscribed, whose seqs exceed every seq
			// it had published before, and so the watermark read just
			// before the dial (unless a restart was handled since: then
			// that watermark is an older incarnation's). A seq at or
			// below it comes from a new publisher incarnation.
			l.restart(fmt.Sprintf("seq %d on a new connection, watermark %d before it was dialed", m.seq, m.wm))
		case l.has && m.seq > l.last && replay:
			// Rule 2. Ask the replay socket for the batches from the
			// watermark itself: the same incarnation answers with the
			// very batch applied at the watermark, a restarted one with
			// another batch under that seq.
			gap := m.seq > l.last+1
			from, to := l.last+1, m.seq
			restarted, err := l.replayMarked(l.last, true)
			switch {
			case restarted:
				l.restart(fmt.Sprintf("batch %d replayed by the publisher differs from the one applied", from-1))
			case err == nil && gap:
				l.countGap(from, to)
				counted = true
			case err != nil:
				replay = false // failed just now: do not wait for it twice
			}
		}
	}
	switch {
	case !l.has && m.seq > 0:
		l.gap(0, m.seq, replay)
	case l.has && m.seq > l.last+1 && !counted:
		l.gap(l.last+1, m.seq, replay)
	}
	if l.has && m.seq <= l.last {
		l.in.st.stale.Add(1)
		return
	}
	l.apply(m.seq, m.payload)
}

// restart handles a detected publisher restart: the rank's blocks are
// cleared (through the writer, in order with its events), the decoder's
// learned state dropped and the watermark reset.
func (l *rankListener) restart(why string) {
	l.in.st.restarts.Add(1)
	l.restarts.Add(1)
	l.setErr(fmt.Errorf("publisher restart detected (%s): rank cleared", why))
	if !l.toWriter(wItem{op: opClear, sink: l.sink, key: l.key}) {
		return
	}
	l.dec.Reset()
	l.has, l.last = false, 0
	l.mu.Lock()
	l.mu.epoch++
	l.wmPlus1.Store(0)
	l.mu.Unlock()
}

// gap records the missing range [from, to) and, if replay, replays it.
func (l *rankListener) gap(from, to uint64, replay bool) {
	l.countGap(from, to)
	if replay {
		_, _ = l.replayMarked(from, false)
	}
}

func (l *rankListener) countGap(from, to uint64) {
	l.in.st.gaps.Add(1)
	l.in.st.missed.Add(to - from)
	l.gaps.Add(1)
}

// replayMarked runs replay with the status showing "replaying", and counts
// and reports its failure.
func (l *rankListener) replayMarked(start uint64, verify bool) (restarted bool, err error) {
	l.mu.Lock()
	l.mu.replaying = true
	l.mu.Unlock()
	restarted, err = l.replay(start, verify)
	l.mu.Lock()
	l.mu.replaying = false
	l.mu.Unlock()
	if err != nil && l.ctx.Err() == nil {
		l.in.st.replayFailures.Add(1)
		l.setErr(fmt.Errorf("replay from %s at seq %d: %w", l.src.ReplayEndpoint, start, err))
	}
	return restarted, err
}

// replay asks the replay endpoint for every batch from seq start on, over
// a fresh DEALER connection, and applies the answers above the watermark
// in order until the end marker. Replies are ["", seq, payload] (vLLM <=
// 0.25, SGLang) or ["", topic, seq, payload] (vLLM >= 0.26, Dynamo's
// mocker). With verify, start is the watermark: if the first answer is the
// batch at start and differs from the one applied (lastHash), replay stops
// and reports restarted.
func (l *rankListener) replay(start uint64, verify bool) (restarted bool, err error) {
	l.in.st.replays.Add(1)
	l.replays.Add(1)
	timeout := l.in.cfg.ReplayTimeout
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	zc, err := dialZMTP(ctx, l.src.ReplayEndpoint, zmq4.Dealer, l.in.replayLimits())
	cancel()
	if err != nil {
		return false, err
	}
	defer zc.Close()
	stop := context.AfterFunc(l.ctx, func() { _ = zc.Close() })
	defer stop()
	var s [SeqLen]byte
	binary.BigEndian.PutUint64(s[:], start)
	if err := zc.send(nil, s[:]); err != nil {
		return false, err
	}
	// want is the first seq the listener needs: lost history if the
	// answer starts later.
	want := start
	if verify {
		want = start + 1
	}
	first := true
	var frames [][]byte
	for {
		zc.setReadDeadline(time.Now().Add(timeout))
		frames, err = zc.recv(frames)
		if err != nil {
			l.in.countLimit(err)
			return false, err
		}
		seq, payload, end, err := ParseReplayReply(frames)
		if err != nil {
			return false, err
		}
		if end {
			return false, nil
		}
		if first {
			first = false
			if verify && seq == start && l.has && seq == l.last {
				if maphash.Bytes(l.seed, payload) != l.lastHash {
					return true, nil
				}
				continue
			}
			if seq > want {
				l.in.st.replayLost.Add(1)
			}
		}
		if l.has && seq <= l.last {
			continue
		}
		if l.apply(seq, payload) {
			l.in.st.replayedBatches.Add(1)
		}
	}
}

// apply decodes one batch and hands its events to the writer; the
// watermark moves to seq, also when the payload is malformed (counted in
// DecodeErrors). It reports whether the batch's events were accepted.
func (l *rankListener) apply(seq uint64, payload []byte) bool {
	b, err := l.dec.Decode(payload, l.key)
	if err != nil {
		// The batch was received: its seq is not missing. Moving the
		// watermark past it keeps every later batch from counting it
		// (and everything before it) as a gap again; a replay would
		// only return the same bytes.
		l.in.st.decodeErrors.Add(1)
		l.setErr(fmt.Errorf("seq %d: %w", seq, err))
		l.consumed(seq, payload)
		return false
	}
	for i, n := range b.Skipped {
		if n != 0 {
			l.in.st.events[i].Add(n)
		}
	}
	// Number accepted events per rank listener, as Dynamo's listener
	// assigns its own monotonically increasing event_id.
	for i := range b.Events {
		b.Events[i].EventID = l.nextEventID
		l.nextEventID++
	}
	if len(b.Events) > 0 {
		if !l.toWriter(wItem{op: opEvents, sink: l.sink, buf: copyEvents(b.Events)}) {
			return false
		}
	}
	l.consumed(seq, payload)
	l.batches.Add(1)
	return true
}

// consumed moves the watermark to seq, the batch just applied or rejected
// as undecodable, and remembers its payload's hash (rule 2).
func (l *rankListener) consumed(seq uint64, payload []byte) {
	l.last, l.has = seq, true
	l.lastHash = maphash.Bytes(l.seed, payload)
	l.wmPlus1.Store(seq + 1)
}

// toWriter queues it on the worker's writer, blocking while the writer is
// full; it gives up (false) when the listener is stopped.
func (l *rankListener) toWriter(it wItem) bool {
	select {
	case l.w.q <- it:
		return true
	case <-l.ctx.Done():
		if it.buf != nil {
			putEvBuf(it.buf)
		}
		return false
	}
}
