package bench

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Propagation is what the replica probe measured: how long a booking made
// on one replica takes to become visible on another, and its free to
// follow.
//
// Method: every Config.ProbeInterval during the measured window, one probe
// books a workload prompt with select_and_reserve on replica A (A and B
// swap at each probe, so both directions are sampled) and DELETEs it. It
// arms a watch on B (ReplicaProbe.Arm) before each call; B's mesh stamps
// the time at which it finished applying the admission (then the free) to
// its service, and the lag is that time minus the time the call's response
// reached the probe: both readings of one monotonic clock in one process.
// A change applied before the response arrived (the replica publishes
// before it answers) counts as 0. After each stamp the probe checks B
// through the Go API (ReplicaProbe.Mirror): the booking must be live there
// on the worker A chose, then gone after the free.
//
// Why not poll B: a poll often enough to resolve a millisecond would take
// a share of the 2 cores the load is measured on, and a coarse one would
// round every lag up to its period; the stamp costs B one atomic load per
// applied batch while no probe is armed, and the probes add one
// booking per interval (about 1% of the lifecycles at C1024 with the
// default 10 ms).
type Propagation struct {
	Method     string  `json:"method"`
	IntervalMs float64 `json:"interval_ms"`
	// Probes are the bookings probed (made and answered 2xx).
	Probes int64 `json:"probes"`
	// Booked* are the lags of the admissions, Freed* of the frees.
	BookedP50ms float64 `json:"booked_p50_ms"`
	BookedP99ms float64 `json:"booked_p99_ms"`
	BookedMaxMs float64 `json:"booked_max_ms"`
	FreedP50ms  float64 `json:"freed_p50_ms"`
	FreedP99ms  float64 `json:"freed_p99_ms"`
	FreedMaxMs  float64 `json:"freed_max_ms"`
	// AppliedBeforeResponse counts admissions B had applied before A's
	// response reached the probe (recorded as 0 ms).
	AppliedBeforeResponse int64 `json:"applied_before_response"`
	// NotVisible counts admissions not applied on B within probeTimeout,
	// or applied but not live there on A's worker; NotFreed frees not
	// applied within probeTimeout, or a mirror still live after.
	NotVisible int64            `json:"not_visible"`
	NotFreed   int64            `json:"not_freed"`
	Errors     map[string]int64 `json:"errors,omitempty"` // failed probe calls, by class
}

// probeTimeout is how long a probe waits for B to apply a change before
// counting it as not visible (or not freed).
const probeTimeout = time.Second

const probeMethod = "booking on one replica over HTTP, applied-time stamped by the other replica's mesh, checked through its Go API"

// prober runs the probes of one replica run, in one or more windows.
// Its methods are called from one goroutine (the driver's).
type prober struct {
	reps     []Replica
	callers  []*httpCaller
	targets  []*target
	prompts  []Prompt
	prefix   []byte
	interval time.Duration
	k        int           // the next probe's number, across windows
	done     chan struct{} // closed when the running window's goroutine ends; nil when none runs

	booked, freed *Histogram
	out           Propagation
}

func newProber(reps []Replica, prompts []Prompt, idPrefix string, cfg *Config) (*prober, error) {
	pr := &prober{reps: reps, prompts: prompts, prefix: []byte(idPrefix + "-probe-"), interval: cfg.ProbeInterval,
		booked: NewHistogram(), freed: NewHistogram()}
	for i, r := range reps {
		t, err := newTarget("replica "+strconv.Itoa(i)+" probe", r.URL, 2, cfg.Timeout)
		if err != nil {
			pr.close()
			return nil, err
		}
		pr.targets = append(pr.targets, t)
		pr.callers = append(pr.callers, t.newCaller())
	}
	pr.out = Propagation{Method: probeMethod, IntervalMs: ms(cfg.ProbeInterval), Errors: map[string]int64{}}
	return pr, nil
}

// start probes on a goroutine of its own for d (a measured window), or
// until ctx ends; join waits for it.
func (pr *prober) start(ctx context.Context, d time.Duration) {
	if pr.done != nil {
		panic("BUG: bench: probe windows overlap")
	}
	pr.done = make(chan struct{})
	go func() {
		defer close(pr.done)
		end := time.Now().Add(d)
		t := time.NewTicker(pr.interval)
		defer t.Stop()
		for time.Now().Before(end) {
			pr.probe(pr.k)
			pr.k++
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// join waits for the window's probes to stop (at once when none ran).
func (pr *prober) join() {
	if pr.done != nil {
		<-pr.done
		pr.done = nil
	}
}

// result is what the probes of every window measured.
func (pr *prober) result() *Propagation {
	pr.join()
	o := pr.out
	o.BookedP50ms, o.BookedP99ms, o.BookedMaxMs = ms(pr.booked.Quantile(0.5)), ms(pr.booked.Quantile(0.99)), ms(pr.booked.Max())
	o.FreedP50ms, o.FreedP99ms, o.FreedMaxMs = ms(pr.freed.Quantile(0.5)), ms(pr.freed.Quantile(0.99)), ms(pr.freed.Max())
	return &o
}

func (pr *prober) close() {
	pr.join()
	for _, c := range pr.callers {
		c.release()
	}
	for _, t := range pr.targets {
		t.close()
	}
	pr.callers, pr.targets = nil, nil
}

// probe makes probe k: a booking on replica k mod n, watched on the next.
func (pr *prober) probe(k int) {
	n := len(pr.reps)
	a, b := k%n, (k+1)%n
	id := strconv.AppendInt(append([]byte(nil), pr.prefix...), int64(k), 10)
	ids := string(id)
	body := pr.prompts[k%len(pr.prompts)].Body
	watch := pr.reps[b].Probe

	applied, disarm := watch.Arm(ids, ChangeBooked)
	status, err := pr.callers[a].call(routeReserve, id, body)
	sent := time.Now()
	if err != nil || status/100 != 2 {
		disarm()
		pr.out.Errors[errorClass(status, err)]++
		return
	}
	pr.out.Probes++
	worker, _ := responseWorker(pr.callers[a].resp.Body())
	visible := pr.await(applied, sent, pr.booked)
	disarm()
	if w, ok := watch.Mirror(ids); !visible || !ok || w != worker {
		pr.out.NotVisible++
	}

	applied, disarm = watch.Arm(ids, ChangeFreed)
	status, err = pr.callers[a].call(routeDelete, id, nil)
	sent = time.Now()
	if err != nil || status/100 != 2 {
		disarm()
		pr.out.Errors[errorClass(status, err)]++
		return
	}
	freed := pr.await(applied, sent, pr.freed)
	disarm()
	if _, ok := watch.Mirror(ids); !freed || ok {
		pr.out.NotFreed++
	}
}

// await waits at most probeTimeout for an applied stamp and records its lag
// after sent into h; it reports whether the stamp came.
func (pr *prober) await(applied <-chan time.Time, sent time.Time, h *Histogram) bool {
	t := time.NewTimer(probeTimeout)
	defer t.Stop()
	select {
	case at := <-applied:
		lag := at.Sub(sent)
		if lag < 0 {
			if h == pr.booked {
				pr.out.AppliedBeforeResponse++
			}
			lag = 0
		}
		h.Record(lag)
		return true
	case <-t.C:
		return false
	}
}

var workerIDKey = []byte(`"worker_id":`)

// responseWorker reads the worker_id of a selection response.
func responseWorker(b []byte) (uint64, bool) {
	i := bytes.Index(b, workerIDKey)
	if i < 0 {
		return 0, false
	}
	j := i + len(workerIDKey)
	start := j
	var n uint64
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + uint64(b[j]-'0')
	}
	return n, j > start
}

// ApplyStamps is the watch registry behind a host's ReplicaProbe.Arm:
// Arm registers a watch, and the host's apply path, after applying a
// batch of peer changes to its service, calls Applied for each change
// while Armed. The zero value is ready; its methods are safe for
// concurrent use.
type ApplyStamps struct {
	armed atomic.Int64 // len(mu.pending), read without the lock
	mu    struct {
		sync.Mutex
		pending map[stampKey]chan time.Time
	}
}

type stampKey struct {
	id   string
	kind ReplicaChange
}

// Arm implements ReplicaProbe.Arm.
func (s *ApplyStamps) Arm(id string, kind ReplicaChange) (<-chan time.Time, func()) {
	k := stampKey{id, kind}
	ch := make(chan time.Time, 1)
	s.mu.Lock()
	if s.mu.pending == nil {
		s.mu.pending = map[stampKey]chan time.Time{}
	}
	s.mu.pending[k] = ch
	s.armed.Store(int64(len(s.mu.pending)))
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		if s.mu.pending[k] == ch {
			delete(s.mu.pending, k)
			s.armed.Store(int64(len(s.mu.pending)))
		}
		s.mu.Unlock()
	}
}

// Armed reports whether any watch is armed: one atomic load, so that an
// apply path pays nothing more while no probe runs.
func (s *ApplyStamps) Armed() bool { return s.armed.Load() > 0 }

// Applied stamps the watch of (id, kind), if armed, with at, and disarms
// it.
func (s *ApplyStamps) Applied(id string, kind ReplicaChange, at time.Time) {
	s.mu.Lock()
	k := stampKey{id, kind}
	ch, ok := s.mu.pending[k]
	if ok {
		delete(s.mu.pending, k)
		s.armed.Store(int64(len(s.mu.pending)))
	}
	s.mu.Unlock()
	if ok {
		ch <- at // buffered 1, sent once
	}
}
