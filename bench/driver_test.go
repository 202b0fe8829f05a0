package bench

import (
	"context"
	"math"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// callerFunc adapts a function to the caller interface.
type callerFunc func(r route, id, body []byte) (int, error)

func (f callerFunc) call(r route, id, body []byte) (int, error) { return f(r, id, body) }

var onePrompt = []Prompt{{ISL: 16, Body: []byte(`{"isl_tokens":16}`)}}

// stallingCaller answers after 100 µs, except call number stallAt (1-based),
// which takes 100 ms: a handler that stalls once.
func stallingCaller(stallAt int64) func(int) caller {
	var mu sync.Mutex
	var n int64
	return func(int) caller {
		return callerFunc(func(route, []byte, []byte) (int, error) {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			d := 100 * time.Microsecond
			if k == stallAt {
				d = 100 * time.Millisecond
			}
			time.Sleep(d)
			return 200, nil
		})
	}
}

// TestOpenLoopCountsTheStall: at 1,000 ops/s with one goroutine, a 100 ms
// stall delays the ~100 operations scheduled behind it; measured from their
// intended send times they all show the wait, which the closed loop (and any
// measurement from the actual send) hides. Virtual time makes it exact.
func TestOpenLoopCountsTheStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := loadParams{concurrency: 1, rate: 1000, duration: 200 * time.Millisecond, mix: MixSelect, idPrefix: "t"}
		r := runLoad(context.Background(), p, onePrompt, stallingCaller(11))
		if r.Operations != 200 || r.Requests != 200 {
			t.Fatalf("open loop recorded %d ops, %d calls; want exactly rate*duration = 200", r.Operations, r.Requests)
		}
		// Operation 10 (intended at 10 ms) stalls until 110 ms; operations
		// 11..65 then leave more than 50 ms after their intended time.
		t.Logf("open: p50 %.3f p90 %.3f p99 %.3f max %.3f late %d lag %.2f", r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.LateOps, r.ScheduleLagMaxMs)
		if r.P90ms < 50 || math.Abs(r.MaxMs-100) > 2 {
			t.Errorf("p90 %.3f ms, max %.3f ms: the stall is not in the latency", r.P90ms, r.MaxMs)
		}
		if r.LateOps < 100 || r.LateOps > 115 || r.ScheduleLagMaxMs < 95 {
			t.Errorf("late ops %d, max lag %.1f ms; want ~109 and ~99 ms", r.LateOps, r.ScheduleLagMaxMs)
		}
		if r.OfferedOpsPerSec != 1000 || r.ThroughputRPS != 1000 {
			t.Errorf("offered %v, achieved %v", r.OfferedOpsPerSec, r.ThroughputRPS)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := loadParams{concurrency: 1, duration: 200 * time.Millisecond, mix: MixSelect, idPrefix: "t"}
		r := runLoad(context.Background(), p, onePrompt, stallingCaller(11))
		// Closed loop: one slow sample among ~1,000 fast ones.
		if r.P99ms > 1 || math.Abs(r.MaxMs-100) > 2 || r.Requests < 900 {
			t.Errorf("closed loop: p99 %.3f ms, max %.3f ms, %d calls", r.P99ms, r.MaxMs, r.Requests)
		}
	})
}

// TestOpenLoopWarmupExcluded: operations intended during the warm-up are
// sent but not recorded.
func TestOpenLoopWarmupExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		newCaller := func(int) caller {
			return callerFunc(func(route, []byte, []byte) (int, error) {
				mu.Lock()
				calls++
				mu.Unlock()
				return 200, nil
			})
		}
		p := loadParams{concurrency: 4, rate: 1000, warmup: 50 * time.Millisecond, duration: 100 * time.Millisecond, mix: MixSelect}
		r := runLoad(context.Background(), p, onePrompt, newCaller)
		if r.Operations != 100 || calls != 150 || r.MeasuredS != 0.1 {
			t.Fatalf("recorded %d of %d calls over %v s; want 100 of 150 over 0.1 s", r.Operations, calls, r.MeasuredS)
		}
	})
}

// lifecycleLog is a fake selector that checks the lifecycle protocol: ids
// are unique, later calls use a booked id, and every booking is freed.
type lifecycleLog struct {
	mu       sync.Mutex
	reserves int
	booked   map[string]int // id -> calls after select_and_reserve
	freed    map[string]bool
	bad      []string
}

func (l *lifecycleLog) newCaller(failEvery int) func(int) caller {
	return func(int) caller {
		return callerFunc(func(r route, id, body []byte) (int, error) {
			time.Sleep(time.Millisecond)
			l.mu.Lock()
			defer l.mu.Unlock()
			s := string(id)
			switch r {
			case routeReserve:
				l.reserves++
				if _, dup := l.booked[s]; dup || l.freed[s] {
					l.bad = append(l.bad, "duplicate id "+s)
				}
				if len(body) == 0 || body[0] != '{' {
					l.bad = append(l.bad, "no body")
				}
				if failEvery > 0 && l.reserves%failEvery == 0 {
					return 503, nil
				}
				l.booked[s] = 0
			case routePrefill, routeOutput:
				if _, ok := l.booked[s]; !ok {
					l.bad = append(l.bad, r.String()+" of unbooked "+s)
				}
				l.booked[s]++
			case routeDelete:
				if _, ok := l.booked[s]; !ok {
					l.bad = append(l.bad, "delete of unbooked "+s)
				}
				delete(l.booked, s)
				l.freed[s] = true
			default:
				l.bad = append(l.bad, "unexpected "+r.String())
			}
			return 200, nil
		})
	}
}

func TestLifecycleMixCountsAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lifecycleLog{booked: map[string]int{}, freed: map[string]bool{}}
		p := loadParams{concurrency: 3, warmup: 10 * time.Millisecond, duration: 60 * time.Millisecond,
			mix: MixLifecycle, outputBlocks: 2, idPrefix: "run"}
		r := runLoad(context.Background(), p, onePrompt, l.newCaller(4))
		if len(l.bad) > 0 || len(l.booked) > 0 {
			t.Fatalf("protocol violations %v; %d bookings left", l.bad, len(l.booked))
		}
		res, fails := r.ByRoute["select_and_reserve"], r.Errors["503"]
		if res == 0 || fails == 0 || len(r.Errors) != 1 {
			t.Fatalf("reserves %d, errors %v", res, r.Errors)
		}
		ok := res - fails
		if r.ByRoute["prefill_complete"] != ok || r.ByRoute["output_block"] != 2*ok || r.ByRoute["delete"] != ok {
			t.Fatalf("by route %v with %d failed reserves", r.ByRoute, fails)
		}
		if r.Requests != res+4*ok || r.Operations != res {
			t.Fatalf("requests %d, operations %d, by route %v", r.Requests, r.Operations, r.ByRoute)
		}
		if r.Client.OwnShare < 0 || r.Client.OwnShare > 1 {
			t.Fatalf("own share %v", r.Client.OwnShare)
		}
	})
}

func TestReserveMixAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lifecycleLog{booked: map[string]int{}, freed: map[string]bool{}}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		p := loadParams{concurrency: 5, duration: time.Hour, mix: MixReserve, idPrefix: "run"}
		r := runLoad(ctx, p, onePrompt, l.newCaller(0))
		if len(l.bad) > 0 || len(l.booked) > 0 {
			t.Fatalf("cancel left %d bookings; violations %v", len(l.booked), l.bad)
		}
		if r.MeasuredS < 0.029 || r.MeasuredS > 0.035 || r.ByRoute["delete"] != r.ByRoute["select_and_reserve"] || r.ByRoute["prefill_complete"] != 0 {
			t.Fatalf("measured %v s, by route %v", r.MeasuredS, r.ByRoute)
		}
	})
}

// TestOpenLoopCountsUnsent: operations the schedule wanted in the window but
// that no goroutine could send before the drain deadline are errors.
func TestOpenLoopCountsUnsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		newCaller := func(int) caller {
			return callerFunc(func(route, []byte, []byte) (int, error) {
				time.Sleep(10 * time.Second) // a server that never comes back in time
				return 200, nil
			})
		}
		p := loadParams{concurrency: 2, rate: 1000, duration: 100 * time.Millisecond, mix: MixSelect}
		r := runLoad(context.Background(), p, onePrompt, newCaller)
		if r.Operations != 2 || r.Errors["unsent"] != 98 {
			t.Fatalf("ops %d, errors %v; want 2 sent and 98 unsent", r.Operations, r.Errors)
		}
	})
}

// TestOpenLoopCancelWakesSleepers: goroutines holding tickets far ahead (a
// low rate with many goroutines) stop at once on cancellation.
func TestOpenLoopCancelWakesSleepers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		newCaller := func(int) caller { return callerFunc(func(route, []byte, []byte) (int, error) { return 200, nil }) }
		p := loadParams{concurrency: 64, rate: 1, duration: time.Hour, mix: MixSelect}
		start := time.Now()
		r := runLoad(ctx, p, onePrompt, newCaller)
		if took := time.Since(start); took != 100*time.Millisecond || r.Operations != 1 {
			t.Fatalf("returned after %v with %d operations; want 100ms and 1", took, r.Operations)
		}
	})
}

// overlapCaller answers every selection with 200 and an overlap of
// tokens[k % len] for its k-th selection, and every 4th selection with 503
// (whose overlap must not count).
type overlapCaller struct {
	tokens []int64
	k      int
	last   int64
}

func (c *overlapCaller) call(r route, _, _ []byte) (int, error) {
	if r != routeSelect && r != routeReserve {
		return 200, nil
	}
	c.k++
	if c.k%4 == 0 {
		c.last = -1
		return 503, nil
	}
	c.last = c.tokens[c.k%len(c.tokens)]
	return 200, nil
}

func (c *overlapCaller) overlapTokens() (int64, bool) { return c.last, c.last >= 0 }

// TestMeanOverlapBlocks: the report's mean overlap is overlap.gpu / block
// size over the recorded successful selections, beside their prompts'
// mean blocks; a caller that cannot read overlaps reports 0.
func TestMeanOverlapBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prompts := []Prompt{{ISL: 64, Local: make([]uint64, 4), Body: []byte(`{}`)}, {ISL: 160, Local: make([]uint64, 10), Body: []byte(`{}`)}}
		for _, mix := range []Mix{MixSelect, MixLifecycle} {
			// One goroutine, one operation per ms (96 operations, 24
			// cycles of 4 selections): selections 1, 2, 3, 4 of a cycle
			// carry prompts of 4, 10, 4, 10 blocks and see overlaps of 32,
			// 64, 0 tokens and a 503; the successful ones average
			// (32+64+0)/3 tokens = 2 blocks of 16, and (4+10+4)/3 = 6
			// prompt blocks.
			c := &overlapCaller{tokens: []int64{0, 32, 64, 0}}
			p := loadParams{concurrency: 1, rate: 1000, duration: 96 * time.Millisecond, mix: mix, blockSize: 16}
			r := runLoad(context.Background(), p, prompts, func(int) caller { return c })
			if r.MeanOverlapBlocks != 2 || r.MeanPromptBlocks != 6 {
				t.Fatalf("%v: mean overlap %v blocks, prompt %v blocks", mix, r.MeanOverlapBlocks, r.MeanPromptBlocks)
			}
		}
		p := loadParams{concurrency: 2, duration: 10 * time.Millisecond, mix: MixSelect, blockSize: 16}
		r := runLoad(context.Background(), p, onePrompt, func(int) caller {
			return callerFunc(func(route, []byte, []byte) (int, error) { time.Sleep(time.Millisecond); return 200, nil })
		})
		if r.Operations == 0 || r.MeanOverlapBlocks != 0 || r.MeanPromptBlocks != 0 {
			t.Fatalf("no overlap reader: %d ops, overlap %v, prompt %v", r.Operations, r.MeanOverlapBlocks, r.MeanPromptBlocks)
		}
	})
}

// TestFoldWorkersKeepsResults: a window folded into one worker keeps
// every counter of its workers (summed, or the latest and largest), and
// merging the folded worker gives the Result of its workers.
func TestFoldWorkersKeepsResults(t *testing.T) {
	var ws []*worker
	var want worker
	var samples int64
	for g := range 5 {
		w := &worker{all: NewHistogram(), sel: NewHistogram(), selOK: NewHistogram(), errs: map[string]int64{"503": int64(g)},
			ops: int64(10 + g), ownNs: int64(1000 * (g + 1)), callNs: int64(5000 * (g + 1)), lagMax: time.Duration(g) * time.Millisecond,
			late: int64(g), ovTokens: int64(64 * g), ovN: int64(g + 1), promptBlocks: int64(7 * g),
			lastRecDone: time.Unix(int64(100+g), 0)}
		w.reqs[routeReserve], w.reqs[routeDelete] = int64(10+g), int64(9+g)
		for i := range 20 * (g + 1) {
			d := time.Duration(i*(g+1)) * 100 * time.Microsecond
			w.all.Record(d)
			w.sel.Record(2 * d)
			w.selOK.Record(3 * d)
			samples++
		}
		want.reqs[routeReserve] += w.reqs[routeReserve]
		want.reqs[routeDelete] += w.reqs[routeDelete]
		want.ops += w.ops
		want.ownNs += w.ownNs
		want.callNs += w.callNs
		want.late += w.late
		want.ovTokens += w.ovTokens
		want.ovN += w.ovN
		want.promptBlocks += w.promptBlocks
		ws = append(ws, w)
	}
	f := foldWorkers(ws)
	if f.reqs != want.reqs || f.ops != want.ops || f.ownNs != want.ownNs || f.callNs != want.callNs || f.late != want.late ||
		f.ovTokens != want.ovTokens || f.ovN != want.ovN || f.promptBlocks != want.promptBlocks {
		t.Fatalf("folded reqs %v ops %d own %d call %d late %d overlap %d/%d blocks %d, want %v %d %d %d %d %d/%d %d", f.reqs, f.ops, f.ownNs, f.callNs, f.late, f.ovTokens, f.ovN, f.promptBlocks, want.reqs, want.ops, want.ownNs, want.callNs, want.late, want.ovTokens, want.ovN, want.promptBlocks)
	}
	if f.errs["503"] != 10 || f.lagMax != 4*time.Millisecond || !f.lastRecDone.Equal(time.Unix(104, 0)) {
		t.Fatalf("errors %v, lag max %v, last done %v", f.errs, f.lagMax, f.lastRecDone)
	}
	if f.all.Count() != samples || f.sel.Count() != samples || f.selOK.Count() != samples {
		t.Fatalf("histograms hold %d, %d, %d samples, want %d", f.all.Count(), f.sel.Count(), f.selOK.Count(), samples)
	}
	if got, merged := mergeWorkers([]*worker{f}, 16), mergeWorkers(ws, 16); !reflect.DeepEqual(got, merged) {
		t.Fatalf("folded %+v\nwant   %+v", got, merged)
	}
}

// TestWindowsReleaseTheirCallers: a window's client goroutines, their
// callers and what those hold are garbage once the window returns; only
// its folded results stay (a run of many --rounds windows at C1024 held
// every window's workers to its end).
func TestWindowsReleaseTheirCallers(t *testing.T) {
	type bigCaller struct {
		callerFunc
		buf []byte
	}
	var made, freed atomic.Int64
	newCaller := func(int) caller {
		c := &bigCaller{callerFunc: func(route, []byte, []byte) (int, error) { time.Sleep(100 * time.Microsecond); return 200, nil },
			buf: make([]byte, 64<<10)}
		made.Add(1)
		runtime.AddCleanup(c, func(*atomic.Int64) { freed.Add(1) }, &freed)
		return c
	}
	p := loadParams{concurrency: 16, duration: 5 * time.Millisecond, mix: MixSelect, idPrefix: "w"}
	var slices []loadSlice
	for range 4 {
		slices = append(slices, runSlice(context.Background(), p, onePrompt, newCaller))
	}
	deadline := time.Now().Add(10 * time.Second)
	for freed.Load() < made.Load() && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if freed.Load() != made.Load() {
		t.Fatalf("%d of %d callers still reachable after their windows", made.Load()-freed.Load(), made.Load())
	}
	if r := mergeSlices(p, slices); r.Requests == 0 || r.Operations != r.Requests {
		t.Fatalf("merged %d requests, %d operations", r.Requests, r.Operations)
	}
	runtime.KeepAlive(slices)
}
