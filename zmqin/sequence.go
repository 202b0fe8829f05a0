package zmqin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// The processing half of a rankListener, run by its goroutine for each
// message of a connection: the sequence rules of the package doc
// ("Sequence numbers, replay and restarts"), replay over DEALER, decoding
// and the hand-off to the worker's writer. Everything here is owned by
// that goroutine.

// handle applies the sequence rules to one live message (see the package
// doc, "Sequence numbers, replay and restarts").
func (l *rankListener) handle(m queued, first bool) {
	replay := l.src.ReplayEndpoint != ""
	// counted is set once rule 2 has counted the gap up to m.seq: what its
	// replay did not fill is still missing but must not be counted twice.
	counted := false
	if first {
		switch {
		case l.has && m.seq <= l.last:
			// Rule 1. The publisher sends a new subscriber only batches
			// published after it subscribed, whose seqs exceed every seq
			// it had published before, and so the watermark: run
			// consumed every message of the previous connection before
			// dialing this one. A seq at or below it comes from a new
			// publisher incarnation.
			l.restart(fmt.Sprintf("seq %d first on a new connection, watermark %d", m.seq, l.last))
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
	l.lg.LogAt(slog.LevelWarn, "kv publisher restart detected; rank cleared", "why", why)
	if !l.toWriter(wItem{op: opClear, sink: l.sink, key: l.key}) {
		return
	}
	l.dec.Reset()
	l.has, l.last = false, 0
	l.wmPlus1.Store(0)
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
	l.lg.LogAt(slog.LevelWarn, "kv event gap", "from_seq", from, "to_seq", to, "missed", to-from, "replay", l.src.ReplayEndpoint != "")
}

// replayMarked runs replay with the status showing "replaying", and counts
// and reports its failure.
func (l *rankListener) replayMarked(start uint64, verify bool) (restarted bool, err error) {
	l.mu.Lock()
	l.mu.replaying = true
	l.mu.Unlock()
	l.replayApplied = 0
	restarted, err = l.replay(start, verify)
	l.mu.Lock()
	l.mu.replaying = false
	l.mu.Unlock()
	switch {
	case err != nil && l.ctx.Err() == nil:
		l.in.st.replayFailures.Add(1)
		l.setErr(fmt.Errorf("replay from %s at seq %d: %w", l.src.ReplayEndpoint, start, err))
		l.lg.LogAt(slog.LevelWarn, "kv replay failed; the batches stay lost", "replay_endpoint", l.src.ReplayEndpoint, "from_seq", start, "applied", l.replayApplied, "err", err)
	case err == nil && !restarted:
		l.lg.LogAt(slog.LevelInfo, "kv replay done", "replay_endpoint", l.src.ReplayEndpoint, "from_seq", start, "applied", l.replayApplied)
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
	zc, err := zmtp.Dial(ctx, l.src.ReplayEndpoint, zmtp.Dealer, l.in.replayLimits())
	cancel()
	if err != nil {
		return false, err
	}
	defer zc.Close()
	stop := context.AfterFunc(l.ctx, func() { _ = zc.Close() })
	defer stop()
	var s [SeqLen]byte
	binary.BigEndian.PutUint64(s[:], start)
	if err := zc.Send(nil, s[:]); err != nil {
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
		zc.SetReadDeadline(time.Now().Add(timeout))
		frames, err = zc.Recv(frames)
		if errors.Is(err, zmtp.ErrExtraFrames) {
			l.in.st.extraFrames.Add(1) // a malformed reply: the replay fails
		}
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
				l.lg.LogAt(slog.LevelWarn, "kv replay history gone: the publisher's answer starts later", "wanted_seq", want, "first_seq", seq)
			}
		}
		if l.has && seq <= l.last {
			continue
		}
		if l.apply(seq, payload) {
			l.in.st.replayedBatches.Add(1)
			l.replayApplied++
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
		l.lg.LogAt(slog.LevelWarn, "kv batch undecodable; skipped", "seq", seq, "err", err)
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
	// The watermark and the rank's batch count move before the events
	// reach the writer, so whoever sees a batch's events in the index
	// also sees its seq in the rank's status. When toWriter gives up the
	// listener is stopping for good, and its watermark goes with it.
	l.consumed(seq, payload)
	l.batches.Add(1)
	if len(b.Events) > 0 {
		return l.toWriter(wItem{op: opEvents, sink: l.sink, buf: copyEvents(b.Events)})
	}
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
	if it.buf != nil && !l.w.hold(l.ctx, it.buf.size) {
		putEvBuf(it.buf)
		return false
	}
	select {
	case l.w.q <- it:
		return true
	case <-l.ctx.Done():
		if it.buf != nil {
			l.w.unhold(it.buf.size, l.w.weight(it.buf.size))
			putEvBuf(it.buf)
		}
		return false
	}
}
