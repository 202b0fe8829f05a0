package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// loadTarget is one configuration under load: the no-op baseline, the
// selector, or a set of replicas; its engines (when the run has its own);
// a control client per server (registered, ready, filled); and the load's
// client pools, over which each client goroutine spreads its operations
// (multiCaller) when there are several. openTarget makes one, measure
// drives one window of load over it, leaks reads what it left booked,
// close stops everything in reverse order.
type loadTarget struct {
	urls    []string  // the servers
	reps    []Replica // the replicas' Go-API side; nil for a single server
	ctls    []*Control
	targets []*target // the load's client pools
	fill    *FillStats
	stops   []func() // undone in reverse by close
}

// serverStart starts the servers of a loadTarget: their URLs and, for
// in-process replicas, their Go-API side.
type serverStart func() (urls []string, reps []Replica, stop func(), err error)

// openTarget starts the servers with start, and when engines is set (and
// the run has no endpoints of its own) one simulated engine per worker;
// registers the workers with every server, waits until each is ready and,
// with cfg.Fill, fills the engines and every server's index. The load gets
// max(pools, servers) client pools, pool i on server i mod servers: a
// replica run gives one replica as many pools as the replicas have, so
// that both are driven by the same client (see runReplicas). name labels
// the clients' errors. On error everything started is stopped.
func openTarget(ctx context.Context, cfg Config, name string, start serverStart, engines bool, pools int, prompts []Prompt, logw io.Writer) (_ *loadTarget, err error) {
	lt := &loadTarget{}
	defer func() {
		if err != nil {
			lt.close()
		}
	}()
	var es []*Engine
	if engines && cfg.EngineBlocks > 0 && len(cfg.KVEventsEndpoints) == 0 {
		if es, err = startEngines(&cfg); err != nil {
			return nil, err
		}
		lt.stops = append(lt.stops, func() { _ = closeEngines(es) })
	}
	urls, reps, stop, err := start()
	if err != nil {
		return nil, err
	}
	lt.stops = append(lt.stops, stop)
	lt.urls, lt.reps = urls, reps
	label := func(i int) string {
		if len(urls) > 1 {
			return name + " " + strconv.Itoa(i)
		}
		return name
	}
	for i, url := range urls {
		ctl, err := NewControl(label(i), url, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		lt.ctls = append(lt.ctls, ctl)
		if err := register(ctl, &cfg); err != nil {
			return nil, err
		}
	}
	for i := range max(pools, len(urls)) {
		t, err := newTarget(label(i%len(urls)), urls[i%len(urls)], cfg.Concurrency+16, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		lt.targets = append(lt.targets, t)
	}
	if cfg.Fill && es != nil {
		st, err := fill(ctx, lt.ctls, &cfg, es, prompts, selectPick(lt.ctls[0]), logw)
		if err != nil {
			return nil, err
		}
		lt.fill = &st
	}
	return lt, nil
}

// measure drives one window of load (runSlice) over the target: with
// several client pools each client goroutine spreads its operations over
// them (multiCaller).
func (lt *loadTarget) measure(ctx context.Context, p loadParams, prompts []Prompt) loadSlice {
	var callers []*httpCaller // newCaller runs on runSlice's caller's goroutine
	sl := runSlice(ctx, p, prompts, func(g int) caller {
		if len(lt.targets) == 1 {
			c := lt.targets[0].newCaller()
			callers = append(callers, c)
			return c
		}
		m := &multiCaller{next: g % len(lt.targets)}
		for _, t := range lt.targets {
			c := t.newCaller()
			callers = append(callers, c)
			m.cs = append(m.cs, c)
		}
		return m
	})
	for _, c := range callers {
		c.release()
	}
	return sl
}

// settleWait bounds how long the leak check waits for the replicas' mirrors
// to be freed by their peers' frees.
const settleWait = 5 * time.Second

// leaks sums the active requests left on the target's servers (waiting for
// the peers' frees with several).
func (lt *loadTarget) leaks() (int64, error) {
	wait := time.Duration(0)
	if len(lt.ctls) > 1 {
		wait = settleWait
	}
	return settleActive(lt.ctls, wait)
}

func (lt *loadTarget) close() {
	for _, t := range lt.targets {
		t.close()
	}
	for _, c := range lt.ctls {
		c.Close()
	}
	for i := len(lt.stops) - 1; i >= 0; i-- {
		lt.stops[i]()
	}
}

// label is the target's description for the report.
func (lt *loadTarget) label() string { return strings.Join(lt.urls, " ") }

// selectorStart is the serverStart of the selector: cfg.Target or
// cfg.StartServer with replicas 0, else cfg.StartReplicas(replicas).
func selectorStart(cfg *Config, replicas int, logw io.Writer) serverStart {
	return replicaStart(cfg, replicas, false, logw)
}

// replicaStart is selectorStart, or with alt cfg.StartAltReplicas(replicas).
func replicaStart(cfg *Config, replicas int, alt bool, logw io.Writer) serverStart {
	return func() ([]string, []Replica, func(), error) {
		if replicas == 0 {
			base, stop, err := ResolveTarget(cfg, logw)
			return []string{base}, nil, stop, err
		}
		start := cfg.StartReplicas
		if alt {
			start = cfg.StartAltReplicas
		}
		reps, stop, err := start(replicas)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("bench: starting %d in-process replicas: %w", replicas, err)
		}
		if cfg.PprofURL == "" && len(reps) > 0 {
			cfg.PprofURL = reps[0].PprofURL
		}
		urls := make([]string, len(reps))
		for i, r := range reps {
			urls[i] = r.URL
		}
		fmt.Fprintf(logw, "in-process replicas at %v\n", urls)
		return urls, reps, stop, nil
	}
}

// leakCheck reads lt's leaks into a report's field: -1 and a warning when
// /loads could not be read, which the report must not pass off as zero.
func leakCheck(lt *loadTarget, warnings *[]string) int64 {
	n, err := lt.leaks()
	if err != nil {
		*warnings = append(*warnings, fmt.Sprintf("leak check failed (leaked_reservations -1): %v", err))
		return -1
	}
	return n
}

// profileAt returns an atMeasureStart hook that captures the profiles of
// cfg.ProfileDir from cfg.PprofURL for window, and a wait that returns the
// files and warnings once the capture has ended (at once when the hook never
// ran: the window never opened). It fails when there is no pprof URL: the
// selector serves pprof on its debug listener, not on its API port.
func profileAt(ctx context.Context, cfg *Config, window time.Duration) (start func(), wait func() (files, warnings []string), err error) {
	pprofBase := cfg.PprofURL
	if pprofBase == "" {
		return nil, nil, fmt.Errorf("%w: profiling needs the selector's pprof URL (its --debug-addr: --pprof http://HOST:6060/debug/pprof)", ErrConfig)
	}
	done := make(chan struct{})
	started := false // set by start, which runs on the driver's goroutine, as wait does
	var files, warnings []string
	start = func() {
		started = true
		go func() {
			defer close(done)
			files, warnings = captureProfiles(ctx, pprofBase, cfg.ProfileDir, window)
		}()
	}
	wait = func() ([]string, []string) {
		if started {
			<-done // the window has passed; the fetches end with it
		}
		return files, warnings
	}
	return start, wait, nil
}
