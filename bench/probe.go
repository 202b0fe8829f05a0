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
// Method: every Config.ProbeInterval during the measured window, a probe
// books a workload prompt with select_and_reserve on replica A (A and B
// swap at each probe, so both directions are sampled) and DELETEs it. It
// arms two watches before each call: on A, the time A handed its change
// to its bus (ReplicaProbe.ArmSent), and on B, the time B finished
// applying it to its service (ReplicaProbe.Arm). The lag is the second
// minus the first: both readings of one monotonic clock in one process,
// from the booking's commit on A to its effect on B, whatever the
// client's own wait for the response. After each apply the probe checks B
// through the Go API (ReplicaProbe.Mirror): the booking must be live there
// on the worker A chose, then gone after the free.
//
// Up to probeLanes probes are in flight at once, each on its own
// connections: under saturation one call waits tens of milliseconds for
// the server, and a single probe in flight took only about 130 samples in
// 10 s, so the p99 was the second-largest sample. A tick that finds every
// lane busy is skipped, so the probes never add more than one booking per
// interval (about 1% of the lifecycles at C1024 with the default 10 ms).
//
// Why not poll B: a poll often enough to resolve a millisecond would take
// a share of the 2 cores the load is measured on, and a coarse one would
// round every lag up to its period. The stamps cost each replica one
// atomic load per published event and per applied batch while no probe is
// armed, and while one is, a lock-free map lookup for every other event:
// only the probe's own take the registry's lock (ApplyStamps).
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
	// response reached the probe (the caller could not have seen the
	// booking missing on B).
	AppliedBeforeResponse int64 `json:"applied_before_response"`
	// NotVisible counts admissions not applied on B within probeTimeout,
	// or applied but not live there on A's worker; NotFreed frees not
	// applied within probeTimeout, or a mirror still live after. NotSent
	// counts changes B applied that A answered without handing to its bus
	// (none should be; no lag is recorded for them). A change A's bus
	// dropped counts as not visible or not freed.
	NotVisible int64            `json:"not_visible"`
	NotFreed   int64            `json:"not_freed"`
	NotSent    int64            `json:"not_sent"`
	Errors     map[string]int64 `json:"errors,omitempty"` // failed probe calls, by class
}

// probeTimeout is how long a probe waits for B to apply a change before
// counting it as not visible (or not freed).
const probeTimeout = time.Second

// probeLanes is the most probes in flight at once (see Propagation).
const probeLanes = 8

const probeMethod = "booking on one replica over HTTP, from its bus publish on that replica to its apply on the other, stamped in process, checked through the other's Go API"

// prober runs the probes of one replica run, in one or more windows.
// Its start, join, result and close are called from one goroutine (the
// driver's); each lane is used by one probe at a time.
type prober struct {
	reps     []Replica
	targets  []*target
	prompts  []Prompt
	prefix   []byte
	interval time.Duration
	k        int           // the next probe's number, across windows
	done     chan struct{} // closed when the running window's goroutine ends; nil when none runs
	lanes    []*probeLane
}

// probeLane is one probe's state: its connections' callers (one per
// replica) and what its probes measured, merged by result.
type probeLane struct {
	pr            *prober
	callers       []*httpCaller
	booked, freed *Histogram
	out           Propagation
}

func newProber(reps []Replica, prompts []Prompt, idPrefix string, cfg *Config) (*prober, error) {
	pr := &prober{reps: reps, prompts: prompts, prefix: []byte(idPrefix + "-probe-"), interval: cfg.ProbeInterval}
	for i, r := range reps {
		t, err := newTarget("replica "+strconv.Itoa(i)+" probe", r.URL, probeLanes, cfg.Timeout)
		if err != nil {
			pr.close()
			return nil, err
		}
		pr.targets = append(pr.targets, t)
	}
	for range probeLanes {
		l := &probeLane{pr: pr, booked: NewHistogram(), freed: NewHistogram(), out: Propagation{Errors: map[string]int64{}}}
		for _, t := range pr.targets {
			l.callers = append(l.callers, t.newCaller())
		}
		pr.lanes = append(pr.lanes, l)
	}
	return pr, nil
}

// start probes on goroutines of its own for d (a measured window), or
// until ctx ends; join waits for them.
func (pr *prober) start(ctx context.Context, d time.Duration) {
	if pr.done != nil {
		panic("BUG: bench: probe windows overlap")
	}
	pr.done = make(chan struct{})
	go func() {
		defer close(pr.done)
		free := make(chan *probeLane, len(pr.lanes))
		for _, l := range pr.lanes {
			free <- l
		}
		end := time.Now().Add(d)
		t := time.NewTicker(pr.interval)
		defer t.Stop()
		for time.Now().Before(end) {
			select {
			case l := <-free:
				k := pr.k
				pr.k++
				go func() {
					l.probe(k)
					free <- l
				}()
			default: // every lane busy: skip this tick
			}
			select {
			case <-ctx.Done():
				end = time.Time{}
			case <-t.C:
			}
		}
		for range pr.lanes { // the window's last probes
			<-free
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
	o := Propagation{Method: probeMethod, IntervalMs: ms(pr.interval), Errors: map[string]int64{}}
	booked, freed := NewHistogram(), NewHistogram()
	for _, l := range pr.lanes {
		booked.Merge(l.booked)
		freed.Merge(l.freed)
		o.Probes += l.out.Probes
		o.AppliedBeforeResponse += l.out.AppliedBeforeResponse
		o.NotVisible += l.out.NotVisible
		o.NotFreed += l.out.NotFreed
		o.NotSent += l.out.NotSent
		for k, n := range l.out.Errors {
			o.Errors[k] += n
		}
	}
	o.BookedP50ms, o.BookedP99ms, o.BookedMaxMs = ms(booked.Quantile(0.5)), ms(booked.Quantile(0.99)), ms(booked.Max())
	o.FreedP50ms, o.FreedP99ms, o.FreedMaxMs = ms(freed.Quantile(0.5)), ms(freed.Quantile(0.99)), ms(freed.Max())
	return &o
}

func (pr *prober) close() {
	pr.join()
	for _, l := range pr.lanes {
		for _, c := range l.callers {
			c.release()
		}
	}
	for _, t := range pr.targets {
		t.close()
	}
	pr.lanes, pr.targets = nil, nil
}

// probe makes probe k: a booking on replica k mod n, watched on the next.
func (l *probeLane) probe(k int) {
	pr := l.pr
	n := len(pr.reps)
	a, b := k%n, (k+1)%n
	id := strconv.AppendInt(append([]byte(nil), pr.prefix...), int64(k), 10)
	ids := string(id)
	body := pr.prompts[k%len(pr.prompts)].Body
	watch := pr.reps[b].Probe
	caller := l.callers[a]

	sent, unsend := pr.reps[a].Probe.ArmSent(ids, ChangeBooked)
	applied, disarm := watch.Arm(ids, ChangeBooked)
	status, err := caller.call(routeReserve, id, body)
	answered := time.Now()
	if err != nil || status/100 != 2 {
		unsend()
		disarm()
		l.out.Errors[errorClass(status, err)]++
		return
	}
	l.out.Probes++
	worker, _ := responseWorker(caller.resp.Body())
	visible := l.await(sent, applied, answered, l.booked)
	unsend()
	disarm()
	if w, ok := watch.Mirror(ids); !visible || !ok || w != worker {
		l.out.NotVisible++
	}

	sent, unsend = pr.reps[a].Probe.ArmSent(ids, ChangeFreed)
	applied, disarm = watch.Arm(ids, ChangeFreed)
	status, err = caller.call(routeDelete, id, nil)
	if err != nil || status/100 != 2 {
		unsend()
		disarm()
		l.out.Errors[errorClass(status, err)]++
		return
	}
	freed := l.await(sent, applied, time.Time{}, l.freed)
	unsend()
	disarm()
	if _, ok := watch.Mirror(ids); !freed || ok {
		l.out.NotFreed++
	}
}

// await waits, within probeTimeout, for A's sent stamp and B's applied
// stamp, records the lag between them into h, and reports whether B
// applied the change. With answered set it also counts an apply before it
// (AppliedBeforeResponse).
func (l *probeLane) await(sent, applied <-chan time.Time, answered time.Time, h *Histogram) bool {
	t := time.NewTimer(probeTimeout)
	defer t.Stop()
	var from, at time.Time
	for sent != nil || applied != nil {
		select {
		case from = <-sent: // A stamps before it publishes, and publishes before it answers
			sent = nil
		case at = <-applied:
			applied = nil
		case <-t.C:
			sent, applied = nil, nil
		}
	}
	if at.IsZero() {
		return false
	}
	if !answered.IsZero() && at.Before(answered) {
		l.out.AppliedBeforeResponse++
	}
	if from.IsZero() {
		l.out.NotSent++
		return true
	}
	h.Record(max(0, at.Sub(from)))
	return true
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
// concurrent use. The watches are an immutable map replaced on each Arm
// and disarm (a probe arms a few a second): Armed and the lookup of a
// change no watch waits for take no lock, so a host may call Applied from
// every request goroutine while a probe runs.
type ApplyStamps struct {
	mu      sync.Mutex                                  // serializes the writers of watches
	watches atomic.Pointer[map[stampKey]chan time.Time] // nil or immutable
}

type stampKey struct {
	id   string
	kind ReplicaChange
}

// swap replaces the watches by edit's copy of them; s.mu held.
func (s *ApplyStamps) swap(edit func(map[stampKey]chan time.Time)) {
	m := map[stampKey]chan time.Time{}
	if old := s.watches.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	edit(m)
	s.watches.Store(&m)
}

// Arm implements ReplicaProbe.Arm.
func (s *ApplyStamps) Arm(id string, kind ReplicaChange) (<-chan time.Time, func()) {
	k := stampKey{id, kind}
	ch := make(chan time.Time, 1)
	s.mu.Lock()
	s.swap(func(m map[stampKey]chan time.Time) { m[k] = ch })
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if w := s.watches.Load(); w != nil && (*w)[k] == ch {
			s.swap(func(m map[stampKey]chan time.Time) { delete(m, k) })
		}
	}
}

// Armed reports whether any watch is armed: one atomic load, so that an
// apply path pays nothing more while no probe runs.
func (s *ApplyStamps) Armed() bool {
	w := s.watches.Load()
	return w != nil && len(*w) > 0
}

// Applied stamps the watch of (id, kind), if armed, with at, and disarms
// it.
func (s *ApplyStamps) Applied(id string, kind ReplicaChange, at time.Time) {
	k := stampKey{id, kind}
	if w := s.watches.Load(); w == nil || (*w)[k] == nil {
		return
	}
	s.mu.Lock()
	w := s.watches.Load()
	ch := (*w)[k]
	if ch != nil {
		s.swap(func(m map[stampKey]chan time.Time) { delete(m, k) })
	}
	s.mu.Unlock()
	if ch != nil {
		ch <- at // buffered 1, sent once
	}
}
