package zmqin_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// e2eBatch fills b with batch i of a steady stream: one BlockStored of
// blocks new blocks (block size bs) and, once the stream is warm, one
// BlockRemoved of the blocks stored window batches earlier, so the index
// stays the same size.
func e2eBatch(b *zmqin.WireBatch, i uint64, blocks, bs int, toks []uint32) {
	const window = 1024
	b.Timestamp = float64(i)
	b.Events = b.Events[:0]
	st := zmqin.WireEvent{Kind: radix.Stored, BlockSize: bs, Medium: "GPU", SpecKind: "full_attention", TokenIDs: toks[:blocks*bs]}
	for k := range blocks {
		st.BlockHashes = append(st.BlockHashes, i<<8|uint64(k)+1)
	}
	for k := range toks[:blocks*bs] {
		toks[k] = uint32(i)*uint32(blocks*bs) + uint32(k)
	}
	b.Events = append(b.Events, st)
	if i >= window {
		rm := zmqin.WireEvent{Kind: radix.Removed, Medium: "GPU"}
		for k := range blocks {
			rm.BlockHashes = append(rm.BlockHashes, (i-window)<<8|uint64(k)+1)
		}
		b.Events = append(b.Events, rm)
	}
}

// BenchmarkEndToEnd measures the sustained lossless throughput of one
// rank's pipeline with the default Config: a local Publisher (loopback
// TCP) publishes b.N batches as fast as it can while staying at most
// window batches ahead of what has been applied (flow control only the
// benchmark has; an engine does not wait), through the listener (frames,
// queue, sequence checks, decode, writer) into a radix.Index. The clock
// stops when the last batch is applied. lost must be 0: the window is half
// the default queue, so nothing may overflow.
//
//	go test -run '^$' -bench '^BenchmarkEndToEnd$' -benchtime 200ms ./zmqin/
func BenchmarkEndToEnd(b *testing.B) {
	const window = 512
	for _, blocks := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			const bs = 16
			p := newPublisher(b, zmqpub.Config{})
			in := newIngress(b, zmqin.Config{DialBackoffMin: time.Millisecond})
			ix, _ := radix.New(radix.Config{})
			in.Sync(1, bs, []core.RankSource{{Endpoint: p.Endpoint()}}, benchSink{ix})
			waitSubscribed(b, p, 1)
			var wb zmqin.WireBatch
			toks := make([]uint32, blocks*bs)
			var enc zmqin.Encoder
			n := uint64(b.N)
			done := func() uint64 {
				s := in.Stats()
				return s.BatchesApplied + s.Overflow + p.Stats().Dropped
			}
			b.ReportAllocs()
			b.ResetTimer()
			var applied uint64
			for i := range n {
				for i >= applied+window {
					if applied = done(); i >= applied+window {
						runtime.Gosched()
					}
				}
				e2eBatch(&wb, i, blocks, bs, toks)
				p.PublishPayload(enc.AppendBatch(nil, &wb))
			}
			for done() < n || in.Stats().QueueDepth != 0 {
				time.Sleep(50 * time.Microsecond)
			}
			b.StopTimer()
			s := in.Stats()
			b.ReportMetric(float64(s.BatchesApplied)/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(float64(s.EventsApplied)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(n-s.BatchesApplied), "lost")
		})
	}
}

type benchSink struct{ ix *radix.Index }

func (s benchSink) ApplyBatch(evs []radix.Event) { s.ix.ApplyBatch(evs) }
func (s benchSink) ClearRank(w radix.WorkerKey) {
	s.ix.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
}

// BenchmarkEndToEndPaced offers batches of 4 blocks at a fixed rate, in
// 1 ms steps, to a listener with the default Config (queue of 1024), and
// reports what was lost: the highest rate with lost = 0 is the lossless
// rate of the default configuration on this machine.
//
//	go test -run '^$' -bench EndToEndPaced -benchtime 200ms ./zmqin/
func BenchmarkEndToEndPaced(b *testing.B) {
	for _, rate := range []int{10000, 50000, 100000, 200000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			const bs, blocks = 16, 4
			p := newPublisher(b, zmqpub.Config{HWM: 1 << 22})
			in := newIngress(b, zmqin.Config{DialBackoffMin: time.Millisecond})
			ix, _ := radix.New(radix.Config{})
			in.Sync(1, bs, []core.RankSource{{Endpoint: p.Endpoint()}}, benchSink{ix})
			waitSubscribed(b, p, 1)
			var wb zmqin.WireBatch
			toks := make([]uint32, blocks*bs)
			var enc zmqin.Encoder
			perStep := max(1, rate/1000)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			b.ResetTimer()
			for i := uint64(0); i < uint64(b.N); {
				for k := 0; k < perStep && i < uint64(b.N); k++ {
					e2eBatch(&wb, i, blocks, bs, toks)
					p.PublishPayload(enc.AppendBatch(nil, &wb))
					i++
				}
				<-tick.C
			}
			n := uint64(b.N)
			for {
				s := in.Stats()
				if s.BatchesApplied+s.Overflow+p.Stats().Dropped >= n && s.QueueDepth == 0 {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			s := in.Stats()
			b.ReportMetric(float64(s.BatchesApplied)/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(float64(n-s.BatchesApplied), "lost")
		})
	}
}
