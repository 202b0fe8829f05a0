package bench

import (
	"testing"
	"time"
)

func noopCaller(tb testing.TB) (*httpCaller, func()) {
	tb.Helper()
	url, stop, err := StartNoop("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tg, err := newTarget("noop", url, 4, 5*time.Second)
	if err != nil {
		stop()
		tb.Fatal(err)
	}
	c := tg.newCaller()
	return c, func() {
		c.release()
		tg.close()
		stop()
	}
}

// TestCallerAllocatesNothing: in steady state a call of every route, and the
// worker's recording around it, allocate nothing on the client side, so the
// harness adds no GC work of its own to what it measures.
func TestCallerAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	c, stop := noopCaller(t)
	defer stop()
	ps := Synthetic(smallSynthetic(), 16, 1)
	ps[0].Body = AppendPromptJSON(nil, &ps[0])
	w := &worker{c: c, all: NewHistogram(), sel: NewHistogram(), selOK: NewHistogram(), errs: map[string]int64{}, prefix: []byte("t-0-"), rec: true}
	p := loadParams{mix: MixLifecycle, outputBlocks: 2}
	w.op(p, &ps[0], time.Now(), true) // grow the buffers once
	allocs := testing.AllocsPerRun(50, func() { w.op(p, &ps[0], time.Now(), true) })
	// The server shares the process; it allocates nothing per request either.
	if allocs > 0 {
		t.Fatalf("%.1f allocations per lifecycle operation", allocs)
	}
	if len(w.errs) != 0 {
		t.Fatalf("errors %v", w.errs)
	}
}

// BenchmarkLifecycleNoop is the cost of one lifecycle operation (6 calls)
// through the client against the in-process no-op server, one at a time:
// the floor under every figure the harness reports.
func BenchmarkLifecycleNoop(b *testing.B) {
	c, stop := noopCaller(b)
	defer stop()
	ps := Synthetic(smallSynthetic(), 16, 1)
	ps[0].Body = AppendPromptJSON(nil, &ps[0])
	w := &worker{c: c, all: NewHistogram(), sel: NewHistogram(), selOK: NewHistogram(), errs: map[string]int64{}, prefix: []byte("b-0-"), rec: true}
	p := loadParams{mix: MixLifecycle, outputBlocks: 3}
	b.ReportAllocs()
	for b.Loop() {
		w.op(p, &ps[0], time.Now(), true)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/6/1e3, "µs/call")
}

func TestOverlapGPU(t *testing.T) {
	for _, c := range []struct {
		body  string
		n     int64
		found bool
	}{
		{string(noopSelectBody), 0, true},
		{`{"selection_id":"a","sequence_hashes":[-1,2,3],"isl_tokens":48,"model_name":"default","overlap":{"longest_matched":48,"gpu":32,"dp":{"0":32},"cpu":48,"disk":48},"effective_prefill_tokens":16}`, 32, true},
		{`{"error":"no schedulable workers are available"}`, 0, false},
		{`{"overlap":{"gpu":}}`, 0, false},
		{``, 0, false},
	} {
		if n, found := overlapGPU([]byte(c.body)); n != c.n || found != c.found {
			t.Errorf("%s: %d %v, want %d %v", c.body, n, found, c.n, c.found)
		}
	}
}
