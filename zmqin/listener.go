package zmqin

import (
	"context"
	"encoding/binary"
	"fmt"
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
	// wm and hasWM are the rank's published watermark when that
	// connection was established: the reference for restart detection.
	wm    uint64
	hasWM bool
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
	}

	// The published watermark: written by the processor after each
	// applied batch, read by Status and by the reader at connect time.
	// lastSeq is meaningful only when hasSeq.
	lastSeq atomic.Uint64
	hasSeq  atomic.Bool

	batches, gaps, replays, restarts atomic.Uint64

	// Owned by the processor goroutine.
	dec      *Decoder
	last     uint64 // watermark: the last seq applied (or skipped as undecodable by replay)
	has      bool   // false before the first batch and after a restart
	lastConn uint64 // conn of the last processed message
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
		LastSeq:  l.lastSeq.Load(),
		HasSeq:   l.hasSeq.Load(),
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
	cfg := &l.in.cfg
	backoff := cfg.DialBackoffMin
	var conn uint64
	for l.ctx.Err() == nil {
		zc, err := dialZMTP(l.ctx, l.src.Endpoint, zmq4.Sub, l.in.cfg.MaxFrameSize)
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
			// Full backoff, less up to a quarter of jitter, so that the
			// listeners of a restarted fleet do not dial in lockstep.
			t := time.NewTimer(backoff - time.Duration(rand.Int64N(int64(backoff)/4+1)))
			select {
			case <-l.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, cfg.DialBackoffMax)
			continue
		}
		backoff = cfg.DialBackoffMin
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
		wm, hasWM := l.lastSeq.Load(), l.hasSeq.Load()
		err = l.receive(zc, queued{conn: conn, wm: wm, hasWM: hasWM})
		_ = zc.Close()
		l.mu.Lock()
		l.mu.conn, l.mu.connected = nil, false
		l.mu.Unlock()
		if l.ctx.Err() != nil {
			return
		}
		l.in.st.recvErrors.Add(1)
		l.setErr(fmt.Errorf("receive from %s: %w", l.src.Endpoint, err))
	}
}

// receive moves messages from zc into the queue until a receive error.
// Messages that are not [topic, seq(8), payload] are counted and skipped; a
// message arriving at a full queue is dropped and counted.
func (l *rankListener) receive(zc *zconn, tmpl queued) error {
	for {
		msg, err := zc.recv()
		if err != nil {
			return err
		}
		if msg.Type != zmq4.UsrMsg {
			continue
		}
		seq, payload, err := ParseFrames(msg.Frames)
		if err != nil {
			l.in.st.badFrames.Add(1)
			l.setErr(err)
			continue
		}
		m := tmpl
		m.seq, m.payload = seq, payload
		select {
		case l.q <- m:
		default:
			l.in.st.overflow.Add(1)
		}
	}
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
		}
	}
}

// handle applies the sequence rules to one live message (see the package
// doc, "Sequence numbers, replay and restarts").
func (l *rankListener) handle(m queued) {
	if m.conn != l.lastConn {
		l.lastConn = m.conn
		// The first message of a new connection. The publisher sends a
		// new subscriber only batches published after it connected, whose
		// seqs exceed every seq it had published before, and so the
		// watermark as it stood when the connection was established. A
		// seq at or below that watermark therefore comes from a new
		// publisher incarnation.
		if m.hasWM && m.seq <= m.wm && l.has {
			l.restart(m.seq)
		}
	}
	switch {
	case !l.has && m.seq > 0:
		l.gap(0, m.seq)
	case l.has && m.seq > l.last+1:
		l.gap(l.last+1, m.seq)
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
func (l *rankListener) restart(seq uint64) {
	l.in.st.restarts.Add(1)
	l.restarts.Add(1)
	l.setErr(fmt.Errorf("publisher restart detected: seq %d on a new connection, watermark %d; rank cleared", seq, l.last))
	if !l.toWriter(wItem{op: opClear, sink: l.sink, key: l.key}) {
		return
	}
	l.dec.Reset()
	l.has, l.last = false, 0
	l.hasSeq.Store(false)
	l.lastSeq.Store(0)
}

// gap records the missing range [from, to) and, with a replay endpoint,
// replays it.
func (l *rankListener) gap(from, to uint64) {
	l.in.st.gaps.Add(1)
	l.in.st.missed.Add(to - from)
	l.gaps.Add(1)
	if l.src.ReplayEndpoint == "" {
		return
	}
	l.mu.Lock()
	l.mu.replaying = true
	l.mu.Unlock()
	err := l.replay(from)
	l.mu.Lock()
	l.mu.replaying = false
	l.mu.Unlock()
	if err != nil && l.ctx.Err() == nil {
		l.in.st.replayFailures.Add(1)
		l.setErr(fmt.Errorf("replay from %s at seq %d: %w", l.src.ReplayEndpoint, from, err))
	}
}

// replay asks the replay endpoint for every batch from seq start on, over
// a fresh DEALER connection, and applies the answers in order until the
// end marker. Replies are ["", seq, payload] (vLLM <= 0.25, SGLang) or
// ["", topic, seq, payload] (vLLM >= 0.26, Dynamo's mocker).
func (l *rankListener) replay(start uint64) error {
	l.in.st.replays.Add(1)
	l.replays.Add(1)
	timeout := l.in.cfg.ReplayTimeout
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	zc, err := dialZMTP(ctx, l.src.ReplayEndpoint, zmq4.Dealer, l.in.cfg.MaxFrameSize)
	cancel()
	if err != nil {
		return err
	}
	defer zc.Close()
	stop := context.AfterFunc(l.ctx, func() { _ = zc.Close() })
	defer stop()
	var s [SeqLen]byte
	binary.BigEndian.PutUint64(s[:], start)
	if err := zc.send(nil, s[:]); err != nil {
		return err
	}
	first := true
	for {
		zc.setReadDeadline(time.Now().Add(timeout))
		msg, err := zc.recv()
		if err != nil {
			return err
		}
		if msg.Type != zmq4.UsrMsg {
			continue
		}
		seq, payload, end, err := ParseReplayReply(msg.Frames)
		if err != nil {
			return err
		}
		if end {
			return nil
		}
		if first && seq > start {
			l.in.st.replayLost.Add(1)
		}
		first = false
		if l.has && seq <= l.last {
			continue
		}
		if l.apply(seq, payload) {
			l.in.st.replayedBatches.Add(1)
		}
	}
}

// apply decodes one batch and hands its events to the writer; the
// watermark moves to seq unless the payload is malformed. It reports
// whether the batch was accepted.
func (l *rankListener) apply(seq uint64, payload []byte) bool {
	b, err := l.dec.Decode(payload, l.key)
	if err != nil {
		l.in.st.decodeErrors.Add(1)
		l.setErr(fmt.Errorf("seq %d: %w", seq, err))
		return false
	}
	for i, n := range b.Skipped {
		if n != 0 {
			l.in.st.events[i].Add(n)
		}
	}
	if len(b.Events) > 0 {
		if !l.toWriter(wItem{op: opEvents, sink: l.sink, buf: copyEvents(b.Events)}) {
			return false
		}
	}
	l.last, l.has = seq, true
	l.lastSeq.Store(seq)
	l.hasSeq.Store(true)
	l.batches.Add(1)
	return true
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
