package epp

import (
	"sync/atomic"
	"testing"
)

// BenchmarkEPPStream is one whole stream over loopback gRPC, as Envoy
// drives it in full duplex: request headers, a chat body, the pick and
// booking, the echoed body, response headers, one SSE chunk (prefill
// complete), end of stream (free). allocs/op counts client and server.
func BenchmarkEPPStream(b *testing.B) { benchStream(b, Config{}) }

// benchStream runs BenchmarkEPPStream's stream with cfg.
func benchStream(b *testing.B, cfg Config) {
	g := newGateway(b, 8, cfg, nil)
	b.ReportAllocs()
	for b.Loop() {
		c := g.open()
		c.send(reqHeaders(false, nil))
		c.send(reqBody(chatBody, true))
		c.recv()
		c.echoed()
		c.send(respHeaders(true, false))
		c.recv()
		c.send(respBody(sse(4, 0), true))
		c.recv()
		_ = c.s.CloseSend()
		c.cancel()
	}
	b.StopTimer()
	if g.settle() != 0 {
		b.Fatal("leak")
	}
}

// nopObserver takes every observation and keeps nothing.
type nopObserver struct{ n atomic.Int64 }

func (o *nopObserver) ObserveRequest(*Observation) { o.n.Add(1) }

// BenchmarkEPPStreamObserved is BenchmarkEPPStream with an Observer: the
// observations cost no allocation.
func BenchmarkEPPStreamObserved(b *testing.B) { benchStream(b, Config{Observer: &nopObserver{}}) }
