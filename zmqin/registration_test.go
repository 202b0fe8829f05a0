package zmqin

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// rankCost is what registering ranks costs the process, per rank.
type rankCost struct {
	heap, stack, goroutines float64
}

// settle collects garbage until the heap stops shrinking and returns the
// live heap, the stack memory in use and the goroutine count.
func settle() (heap, stack uint64, goroutines int) {
	var ms runtime.MemStats
	prev := ^uint64(0)
	for range 5 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc >= prev {
			break
		}
		prev = ms.HeapAlloc
	}
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

// syncRanks registers n ranks at endpoint ep, spread over workers of at
// most 1024 ranks (core's cap on data_parallel_size).
func syncRanks(in *Ingress, sink core.EventSink, n int, ep string) {
	for w := 0; n > 0; w++ {
		k := min(n, 1024)
		ranks := make([]core.RankSource, k)
		for r := range ranks {
			ranks[r] = core.RankSource{DPRank: uint32(r), Endpoint: ep}
		}
		in.Sync(uint64(w+1), testBlockSize, ranks, sink)
		n -= k
	}
}

// measureRanks registers n ranks at ep on a fresh Ingress, waits until
// ready says every rank reached its steady state, and returns the cost per
// rank. cfg's backoff should be long enough that unconnected ranks sleep
// while memory is measured.
func measureRanks(t testing.TB, cfg Config, n int, ep string, ready func(Stats) bool) rankCost {
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sink := newIndexSink(t)
	h0, s0, g0 := settle()
	syncRanks(in, sink, n, ep)
	waitFor(t, "ranks at steady state", func() bool { return ready(in.Stats()) })
	h1, s1, g1 := settle()
	runtime.KeepAlive(in)
	return rankCost{
		heap:       (float64(h1) - float64(h0)) / float64(n),
		stack:      (float64(s1) - float64(s0)) / float64(n),
		goroutines: float64(g1-g0) / float64(n),
	}
}

// idleConfig makes an unconnected rank sleep a minute between dials.
func idleConfig() Config {
	c := testConfig()
	c.DialBackoffMin, c.DialBackoffMax = time.Minute, time.Minute
	return c
}

// BenchmarkRegisterRanks registers N ranks on a fresh Ingress, against an
// endpoint nobody listens on (each rank fails its first dial, then waits)
// and against a live publisher (a raw ZMTP peer that costs no goroutine
// per connection), and reports the heap, stack and goroutines each
// registered rank costs at steady state.
//
//	go test -run '^$' -bench RegisterRanks -benchtime 3x ./zmqin/
func BenchmarkRegisterRanks(b *testing.B) {
	for _, tc := range []struct {
		name string
		n    int
	}{{"unreachable", 1024}, {"unreachable", 10000}, {"live", 1024}} {
		b.Run(fmt.Sprintf("%s/ranks=%d", tc.name, tc.n), func(b *testing.B) {
			var ep string
			var ready func(Stats) bool
			if tc.name == "live" {
				ep = newRawPeer(b).Endpoint()
				ready = func(s Stats) bool { return s.Connects >= uint64(tc.n) }
			} else {
				ep = refusedEndpoint
				ready = func(s Stats) bool { return s.DialErrors >= uint64(tc.n) }
			}
			var sum rankCost
			for b.Loop() {
				c := measureRanks(b, idleConfig(), tc.n, ep, ready)
				sum.heap += c.heap
				sum.stack += c.stack
				sum.goroutines += c.goroutines
			}
			b.ReportMetric(sum.heap/float64(b.N), "heapB/rank")
			b.ReportMetric(sum.stack/float64(b.N), "stackB/rank")
			b.ReportMetric(sum.goroutines/float64(b.N), "goroutines/rank")
		})
	}
}

// BenchmarkRedialCPU holds N ranks against an endpoint nobody listens on,
// every rank at the maximum backoff (Min = Max = 5 s, the default
// maximum) and past its first retry (a 6 s warm-up), and reports the CPU
// the process spends per wall-clock second redialing them (cpu-s/s: 0.19
// is 19% of a core) and the dials per second. Each iteration is 100 ms of
// wall time; ranks=0 is the process's own idle cost.
//
//	go test -run '^$' -bench RedialCPU -benchtime 50x ./zmqin/
func BenchmarkRedialCPU(b *testing.B) {
	for _, n := range []int{0, 1024, 10000} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			cfg := Config{DialBackoffMin: 5 * time.Second, DialBackoffMax: 5 * time.Second}
			in := newIngress(b, cfg)
			syncRanks(in, newIndexSink(b), n, refusedEndpoint)
			waitFor(b, "first dials", func() bool { return in.Stats().DialErrors >= uint64(n) })
			time.Sleep(6 * time.Second)
			cpu0, d0, t0 := cpuTime(), in.Stats().DialErrors, time.Now()
			for b.Loop() {
				time.Sleep(100 * time.Millisecond)
			}
			wall := time.Since(t0).Seconds()
			b.ReportMetric((cpuTime()-cpu0).Seconds()/wall, "cpu-s/s")
			b.ReportMetric(float64(in.Stats().DialErrors-d0)/wall, "dials/s")
		})
	}
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Bounds on what a rank that is not connected may cost; measured at 1
// goroutine, about 2 KiB of heap and 4 KiB of stack per rank
// (BenchmarkRegisterRanks), down from 2 goroutines and 68 KiB + 6.5 KiB.
const (
	maxGoroutinesPerIdleRank = 1
	maxHeapPerIdleRank       = 16 << 10
)

// TestUnconnectedRankCost: a registered rank that cannot connect, or that
// lost its connection, costs at most one goroutine and a few KiB: its
// connection's buffers and queue are allocated on connect and released on
// disconnect. Holds under -race too.
func TestUnconnectedRankCost(t *testing.T) {
	const n = 512
	check := func(what string, c rankCost) {
		t.Logf("%s: %.2f goroutines, %.0f heap bytes, %.0f stack bytes per rank", what, c.goroutines, c.heap, c.stack)
		if c.goroutines > maxGoroutinesPerIdleRank || c.heap > maxHeapPerIdleRank {
			t.Errorf("%s: %.2f goroutines and %.0f heap bytes per rank, want at most %d and %d",
				what, c.goroutines, c.heap, maxGoroutinesPerIdleRank, maxHeapPerIdleRank)
		}
	}
	t.Run("unreachable", func(t *testing.T) {
		checkNoLeak(t)
		ep := refusedEndpoint
		check("unreachable", measureRanks(t, idleConfig(), n, ep, func(s Stats) bool { return s.DialErrors >= n }))
	})
	t.Run("disconnected", func(t *testing.T) {
		checkNoLeak(t)
		peer := newRawPeer(t)
		in, err := New(idleConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		h0, s0, g0 := settle()
		syncRanks(in, newIndexSink(t), n, peer.Endpoint())
		waitFor(t, "connected", func() bool { return in.Stats().Connected == n })
		peer.Close() // every connection lost; redials wait a minute
		waitFor(t, "disconnected", func() bool { s := in.Stats(); return s.Connected == 0 && s.RecvErrors == n })
		h1, s1, g1 := settle()
		check("disconnected", rankCost{
			heap:       (float64(h1) - float64(h0)) / n,
			stack:      (float64(s1) - float64(s0)) / n,
			goroutines: float64(g1-g0) / n,
		})
	})
}

// TestDialPacer: an idle pacer lets one second's worth of redials through
// at once, then spaces them 1/rate apart; after a quiet second the burst
// is back.
func TestDialPacer(t *testing.T) {
	var p dialPacer
	p.init(10)
	const ms = int64(time.Millisecond)
	now := int64(5 * time.Second)
	for i := range 10 {
		if d := p.reserve(now); d > 0 {
			t.Fatalf("burst reservation %d waits %v", i, d)
		}
	}
	for i := 1; i <= 5; i++ {
		if d := p.reserve(now); d != time.Duration(int64(i)*100*ms) {
			t.Fatalf("reservation %d past the burst waits %v, want %d ms", i, d, 100*i)
		}
	}
	// Slots reserved up to now+500ms; two seconds later all are past.
	now += int64(2500 * time.Millisecond)
	for i := range 10 {
		if d := p.reserve(now); d > 0 {
			t.Fatalf("second burst reservation %d waits %v", i, d)
		}
	}
	if d := p.reserve(now); d != 100*time.Millisecond {
		t.Fatalf("after the second burst: %v", d)
	}
}
