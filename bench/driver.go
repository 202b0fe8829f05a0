package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadParams is one measured run against one target.
type loadParams struct {
	concurrency  int
	rate         float64 // ops/s; 0 = closed loop
	warmup       time.Duration
	duration     time.Duration
	mix          Mix
	outputBlocks int
	blockSize    int    // the registered block size, for overlap tokens -> blocks
	idPrefix     string // selection ids are idPrefix-<goroutine>-<n>
	label        string // progress-bar label
	progress     io.Writer
	// atMeasureStart, when set, is called once as the measured window opens
	// (from runLoad's own goroutine; it must not block).
	atMeasureStart func()
}

// lateThreshold is the schedule lag above which an open-loop operation counts
// as late (its first call left more than this after its intended time).
const lateThreshold = time.Millisecond

// worker is one client goroutine's state. Only its own goroutine touches it
// during the run, except done and failed, which the progress bar reads.
type worker struct {
	c      caller
	all    *Histogram // every recorded call
	sel    *Histogram // recorded select and select_and_reserve calls
	selOK  *Histogram // those of them that succeeded (2xx: admitted)
	reqs   [nRoutes]int64
	errs   map[string]int64
	ops    int64
	ownNs  int64 // recorded time outside calls: picking the prompt, ids, recording
	callNs int64 // recorded time inside calls
	lagMax time.Duration
	late   int64
	// lastRecDone is when the last recorded call returned.
	lastRecDone time.Time
	id          []byte
	seq         uint64
	prefix      []byte
	rec         bool      // the current operation is in the measured window
	lastRet     time.Time // when the previous call returned (or the op began)
	// ov reads the overlap of a selection's response (nil: the caller
	// cannot). ovTokens is the sum of overlap.gpu over the ovN recorded
	// selections it read, promptBlocks their prompts' full blocks;
	// curBlocks is the current operation's prompt blocks.
	ov            overlapReader
	ovTokens, ovN int64
	promptBlocks  int64
	curBlocks     int

	done   atomic.Int64 // calls completed, recorded or not
	failed atomic.Int64 // recorded calls that failed
	_      [64]byte     // keep the atomics of neighbouring workers off one cache line
}

// runLoad drives one target and returns the merged result. Every goroutine
// finishes the operation it has started after the window closes (or ctx is
// cancelled), so a lifecycle's DELETE is always sent: what is left booked
// afterwards is a leak of the server, not of the harness.
//
// Closed loop: each of the goroutines runs operations back to back until the
// end; an operation's first call is timed from its actual send.
//
// Open loop: operation k is intended to start at start + k/rate. A free
// goroutine takes the next k from a shared counter, sleeps until its intended
// time if that is still ahead, and times the first call from the intended
// time, so time spent waiting for a free goroutine (because the server
// stalled them all) is counted as latency instead of silently shifting the
// schedule (coordinated omission). The later calls of the operation depend on
// the first and are timed from their actual send. Operations intended before
// the end that are still waiting for a goroutine when it comes are sent
// afterwards (the backlog is drained) for at most max(duration, 1 s); those
// never sent are counted as errors["unsent"].
//
// An operation is recorded when its intended start is within [warmup,
// warmup+duration); every call of a recorded operation is recorded.
func runLoad(ctx context.Context, p loadParams, prompts []Prompt, newCaller func(g int) caller) Result {
	return mergeSlices(p, []loadSlice{runSlice(ctx, p, prompts, newCaller)})
}

// loadSlice is what one window of the load measured, before merging: its
// goroutines' state (histograms, counters), the window up to the last
// recorded completion (span) and as run (measured, shorter when
// cancelled), the process CPU over measured (when cpuOK), and the open
// loop's operations never sent.
type loadSlice struct {
	ws             []*worker
	span, measured time.Duration
	cpu            time.Duration
	cpuOK          bool
	unsent         int64
}

// runSlice runs one window of runLoad: p's warm-up, then p's duration.
func runSlice(ctx context.Context, p loadParams, prompts []Prompt, newCaller func(g int) caller) loadSlice {
	if len(prompts) == 0 || p.concurrency < 1 || p.duration <= 0 {
		panic("BUG: bench: runLoad without prompts, goroutines or duration")
	}
	start := time.Now()
	measureStart := start.Add(p.warmup)
	end := measureStart.Add(p.duration)
	var next atomic.Int64
	var stop atomic.Bool
	stopCh := make(chan struct{}) // closed with stop set
	halt := func() {
		if !stop.Swap(true) {
			close(stopCh)
		}
	}
	nsPerOp := 0.0
	if p.rate > 0 {
		nsPerOp = float64(time.Second) / p.rate
	}

	// The open loop drains the backlog of operations intended before the end
	// for at most this long after it; what is still unsent then is counted
	// as errors["unsent"].
	drainUntil := end.Add(max(p.duration, time.Second))

	ws := make([]*worker, p.concurrency)
	var wg sync.WaitGroup
	for g := range ws {
		w := &worker{
			c: newCaller(g), all: reuseHistogram(), sel: reuseHistogram(), selOK: reuseHistogram(),
			errs:   map[string]int64{},
			prefix: fmt.Appendf(nil, "%s-%d-", p.idPrefix, g),
		}
		w.ov, _ = w.c.(overlapReader)
		ws[g] = w
		wg.Go(func() {
			var timer *time.Timer // reused for the open loop's waits
			for !stop.Load() {
				var intended time.Time
				var k int64
				if p.rate > 0 {
					if time.Now().After(drainUntil) {
						return
					}
					k = next.Add(1) - 1
					intended = start.Add(time.Duration(float64(k) * nsPerOp))
					if !intended.Before(end) {
						return
					}
					if d := time.Until(intended); d > 0 {
						if timer == nil {
							timer = time.NewTimer(d)
						} else {
							timer.Reset(d)
						}
						select {
						case <-timer.C:
						case <-stopCh: // cancelled: do not wait for a ticket that will not be sent
							return
						}
					}
				} else {
					intended = time.Now()
					if !intended.Before(end) {
						return
					}
					k = next.Add(1) - 1
				}
				w.op(p, &prompts[k%int64(len(prompts))], intended, !intended.Before(measureStart))
			}
		})
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()

	// The main goroutine samples the process CPU over the measured window,
	// draws the progress bar and turns ctx cancellation into a stop.
	var cpu0, cpu1 time.Duration
	var cpuOK bool
	waitUntil := func(t time.Time) bool {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(t) {
			d := time.Until(t)
			if p.progress != nil && d > 250*time.Millisecond {
				select {
				case <-ctx.Done():
					return false
				case <-tick.C:
					drawProgress(p, ws, start, measureStart, end)
				}
				continue
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
			}
		}
		return true
	}
	measured := p.duration
	cancelled := false
	if waitUntil(measureStart) {
		if p.atMeasureStart != nil {
			p.atMeasureStart()
		}
		cpu0, cpuOK = processCPU()
		if !waitUntil(end) {
			measured = time.Since(measureStart)
			cancelled = true
		}
		cpu1, _ = processCPU()
	} else {
		measured, cancelled = 0, true
	}
	if cancelled {
		halt()
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		halt() // cancelled while draining: finish the started operations only
		cancelled = true
		<-allDone
	}
	if p.progress != nil {
		drawProgress(p, ws, start, measureStart, end)
		fmt.Fprintln(p.progress)
	}

	// Operations started in the window may complete after it (and the open
	// loop may drain a backlog): the rate is taken over the span up to the
	// last recorded completion.
	var lastDone time.Time
	var ops int64
	for _, w := range ws {
		if w.lastRecDone.After(lastDone) {
			lastDone = w.lastRecDone
		}
		ops += w.ops
	}
	sl := loadSlice{ws: []*worker{foldWorkers(ws)}, span: max(measured, lastDone.Sub(measureStart)), measured: measured, cpu: cpu1 - cpu0, cpuOK: cpuOK}
	for _, w := range ws { // folded, and no goroutine reads them any more
		w.all.recycle()
		w.sel.recycle()
		w.selOK.recycle()
		w.all, w.sel, w.selOK = nil, nil, nil
	}
	if p.rate > 0 && !cancelled {
		sl.unsent = max(0, ticketsIn(start, measureStart, end, nsPerOp)-ops)
	}
	return sl
}

// foldWorkers returns one worker holding the window's recorded results
// (histograms and counters; no caller, ids or prefix), so a loadSlice
// keeps three histograms, not three per client goroutine with each
// goroutine's caller and its buffers: a run of --rounds windows over
// three targets at C1024 held 15 windows' 1,024 workers until its end,
// 1.6 GB of live heap at 100 s (3 histograms of about 40 KB and response
// buffers of about 50 KB per worker per window).
func foldWorkers(ws []*worker) *worker {
	f := &worker{all: NewHistogram(), sel: NewHistogram(), selOK: NewHistogram(), errs: map[string]int64{}}
	for _, w := range ws {
		f.all.Merge(w.all)
		f.sel.Merge(w.sel)
		f.selOK.Merge(w.selOK)
		for i, n := range w.reqs {
			f.reqs[i] += n
		}
		for k, n := range w.errs {
			f.errs[k] += n
		}
		f.ops += w.ops
		f.ownNs += w.ownNs
		f.callNs += w.callNs
		f.lagMax = max(f.lagMax, w.lagMax)
		f.late += w.late
		if w.lastRecDone.After(f.lastRecDone) {
			f.lastRecDone = w.lastRecDone
		}
		f.ovTokens += w.ovTokens
		f.ovN += w.ovN
		f.promptBlocks += w.promptBlocks
	}
	return f
}

// mergeSlices merges windows of one target into its Result: latencies and
// counts over every window, rates and CPU over their summed spans.
func mergeSlices(p loadParams, slices []loadSlice) Result {
	var ws []*worker
	var span, measured, cpu time.Duration
	cpuOK := true
	var unsent int64
	for _, sl := range slices {
		ws = append(ws, sl.ws...)
		span += sl.span
		measured += sl.measured
		cpu += sl.cpu
		cpuOK = cpuOK && sl.cpuOK
		unsent += sl.unsent
	}
	r := mergeWorkers(ws, p.blockSize)
	r.MeasuredS = span.Seconds()
	if span > 0 {
		r.ThroughputRPS = float64(r.Requests) / span.Seconds()
		r.OpsPerSec = float64(r.Operations) / span.Seconds()
	}
	if measured > 0 && cpuOK {
		r.Client.ProcessCPUCores = cpu.Seconds() / measured.Seconds()
	}
	r.Client.Goroutines = p.concurrency
	if p.rate > 0 {
		r.OfferedOpsPerSec = p.rate
		if unsent > 0 {
			r.Errors["unsent"] = unsent
		}
	}
	return r
}

// ticketsIn counts the k >= 0 whose intended time start + k*nsPerOp falls in
// [from, to), with the same arithmetic as the drivers.
func ticketsIn(start, from, to time.Time, nsPerOp float64) int64 {
	at := func(k int64) time.Time { return start.Add(time.Duration(float64(k) * nsPerOp)) }
	first := func(t time.Time) int64 { // smallest k with at(k) >= t
		k := max(0, int64(float64(t.Sub(start))/nsPerOp)-1)
		for at(k).Before(t) {
			k++
		}
		for k > 0 && !at(k-1).Before(t) {
			k--
		}
		return k
	}
	return first(to) - first(from)
}

// op runs one operation of the mix with prompt pr; intended is when its first
// call should leave.
func (w *worker) op(p loadParams, pr *Prompt, intended time.Time, rec bool) {
	w.rec = rec
	w.curBlocks = len(pr.Local)
	now := time.Now()
	if p.rate > 0 || w.lastRet.IsZero() {
		// Open loop: the sleep until the intended time is not the client's
		// own work. Closed loop: the time since the last call returned is.
		w.lastRet = now
	}
	if rec {
		w.ops++
		if lag := now.Sub(intended); p.rate > 0 && lag > 0 {
			w.lagMax = max(w.lagMax, lag)
			if lag > lateThreshold {
				w.late++
			}
		}
	}
	if p.mix == MixSelect {
		w.do(routeSelect, nil, pr.Body, intended)
		return
	}
	if p.mix == MixEPP {
		w.do(routeEPP, nil, pr.openAI, intended) // the whole stream is one call
		return
	}
	w.id = strconv.AppendUint(append(w.id[:0], w.prefix...), w.seq, 10)
	w.seq++
	if p.mix == MixDisagg {
		if w.do(routePlan, w.id, pr.Body, intended) {
			w.do(routePlanPrefill, w.id, nil, time.Time{})
			w.do(routePlanDelete, w.id, nil, time.Time{})
		}
		return
	}
	if !w.do(routeReserve, w.id, pr.Body, intended) {
		return // nothing was booked
	}
	if p.mix == MixLifecycle {
		w.do(routePrefill, w.id, nil, time.Time{})
		for range p.outputBlocks {
			w.do(routeOutput, w.id, nil, time.Time{})
		}
	}
	w.do(routeDelete, w.id, nil, time.Time{})
}

// do makes one call and records it; t0 is the time its latency is measured
// from (zero: its actual send). It reports whether the call succeeded (2xx).
func (w *worker) do(r route, id, body []byte, t0 time.Time) bool {
	sent := time.Now()
	if t0.IsZero() {
		t0 = sent
	}
	status, err := w.c.call(r, id, body)
	now := time.Now()
	w.done.Add(1)
	ok := err == nil && status >= 200 && status < 300
	if w.rec {
		w.ownNs += int64(sent.Sub(w.lastRet))
		w.callNs += int64(now.Sub(sent))
		lat := now.Sub(t0)
		w.all.Record(lat)
		if r.selection() {
			w.sel.Record(lat)
			if ok {
				w.selOK.Record(lat)
			}
		}
		w.reqs[r]++
		w.lastRecDone = now
		if !ok {
			w.errs[errorClass(status, err)]++
			w.failed.Add(1)
		} else if w.ov != nil && r.selection() {
			if tok, found := w.ov.overlapTokens(); found {
				w.ovTokens += tok
				w.ovN++
				w.promptBlocks += int64(w.curBlocks)
			}
		}
	}
	w.lastRet = now
	return ok
}

// mergeWorkers folds the goroutines' histograms and counters
// (foldWorkers) into a Result; bs converts overlap tokens to blocks.
func mergeWorkers(ws []*worker, bs int) Result {
	f := foldWorkers(ws)
	r := Result{Errors: f.errs, ByRoute: map[string]int64{}, Operations: f.ops, ScheduleLagMaxMs: ms(f.lagMax), LateOps: f.late}
	for i, n := range f.reqs {
		if n > 0 {
			r.ByRoute[route(i).String()] = n
		}
		r.Requests += n
	}
	if f.ovN > 0 && bs > 0 {
		r.MeanOverlapBlocks = float64(f.ovTokens) / float64(bs) / float64(f.ovN)
		r.MeanPromptBlocks = float64(f.promptBlocks) / float64(f.ovN)
	}
	r.setLatency(f.all, f.sel)
	r.AdmittedP50ms, r.AdmittedP99ms, r.AdmittedMaxMs = ms(f.selOK.Quantile(0.50)), ms(f.selOK.Quantile(0.99)), ms(f.selOK.Max())
	if r.Requests > 0 {
		r.Client.OwnUsPerRequest = float64(f.ownNs) / 1e3 / float64(r.Requests)
	}
	if f.ownNs+f.callNs > 0 {
		r.Client.OwnShare = float64(f.ownNs) / float64(f.ownNs+f.callNs)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// drawProgress redraws the one-line progress bar.
func drawProgress(p loadParams, ws []*worker, start, measureStart, end time.Time) {
	var done, failed int64
	for _, w := range ws {
		done += w.done.Load()
		failed += w.failed.Load()
	}
	now := time.Now()
	elapsed := now.Sub(start)
	total := end.Sub(start)
	frac := min(1, float64(elapsed)/float64(total))
	const width = 30
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if float64(i) < frac*width {
			bar[i] = '#'
		}
	}
	phase := "measure"
	if now.Before(measureStart) {
		phase = "warmup "
	}
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	fmt.Fprintf(p.progress, "\r%-8s %s [%s] %5.1f/%.1fs %9.0f req/s  errors %d ",
		p.label, phase, bar, elapsed.Seconds(), total.Seconds(), rate, failed)
}
