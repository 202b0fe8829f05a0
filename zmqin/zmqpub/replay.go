package zmqpub

import (
	"encoding/binary"
	"errors"
	"net"

	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// The replay side of a Publisher: a ROUTER socket answering each request
// with the buffered batches from the requested seq on, then an end marker.

func (p *Publisher) acceptReplay() {
	defer p.wg.Done()
	for {
		c, err := p.replayLn.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serveReplay(c)
	}
}

// serveReplay answers one DEALER (or REQ) client's replay requests, the
// way vLLM's ROUTER does: a request is exactly ["", start_seq] as sent by
// the client (the ROUTER's identity frame is implicit on a one-peer
// connection); anything else is ignored without a reply.
func (p *Publisher) serveReplay(c net.Conn) {
	defer p.wg.Done()
	zc, err := zmtp.Open(p.ctx, c, zmtp.Router, true, publisherLimits)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		_ = zc.Close()
		return
	}
	p.mu.conns[zc] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.mu.conns, zc)
		p.mu.Unlock()
		_ = zc.Close()
	}()
	topic := []byte(p.cfg.Topic)
	end := make([]byte, zmqin.SeqLen)
	binary.BigEndian.PutUint64(end, zmqin.ReplayEndSeq)
	var frames [][]byte
	for {
		frames, err = zc.Recv(frames)
		if errors.Is(err, zmtp.ErrExtraFrames) {
			continue // not a replay request
		}
		if err != nil {
			return
		}
		if len(frames) != 2 || len(frames[0]) != 0 || len(frames[1]) == 0 || len(frames[1]) > zmqin.SeqLen {
			continue
		}
		var start uint64
		for _, b := range frames[1] {
			start = start<<8 | uint64(b)
		}
		p.replayRequests.Add(1)
		for _, e := range p.snapshot(start) {
			var s [zmqin.SeqLen]byte
			binary.BigEndian.PutUint64(s[:], e.seq)
			var frames [][]byte
			if p.cfg.LegacyReplay {
				frames = [][]byte{nil, s[:], e.payload}
			} else {
				frames = [][]byte{nil, topic, s[:], e.payload}
			}
			if err := zc.SendHeld(frames); err != nil {
				return
			}
			p.replayedBatch.Add(1)
		}
		var err2 error
		if p.cfg.LegacyReplay {
			err2 = zc.Send(nil, end, nil)
		} else {
			err2 = zc.Send(nil, nil, end, nil)
		}
		if err2 != nil {
			return
		}
	}
}

// snapshot returns the buffered batches with seq >= start, oldest first.
func (p *Publisher) snapshot(start uint64) []ringEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.mu.ring)
	out := make([]ringEntry, 0, n)
	for i := range n {
		e := p.mu.ring[(p.mu.head+i)%n]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}
