package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// IsTerminal reports whether f is a character device (a terminal), where a
// progress bar redrawn with carriage returns makes sense.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Run performs the load run cfg describes and returns its report:
//
//  1. build the workload's prompts and their request bodies (PromptForm);
//  2. with Baseline "noop": start the no-op server on loopback, register the
//     workers there, and drive it with the same client, mix and prompts;
//  3. with Replicas > 1: drive one replica alone (StartReplicas(1)) as in
//     step 4, for the report's same-run comparison;
//  4. drive the selector: with EngineBlocks, start one simulated engine per
//     worker; resolve the selector (cfg.Target, or cfg.StartServer when
//     Target is empty, ErrNoServer when neither is given; with Replicas >
//     1, StartReplicas(Replicas)); register the workers with each replica,
//     wait for GET /ready; with Fill, fill the engines' pools and the
//     selectors' indexes from the workload (fill); drive it (capturing
//     profiles during its measured window when ProfileDir is set; probing
//     propagation between replicas during it with Replicas > 1);
//  5. read GET /loads for reservations left active (summed over the
//     replicas, once their peers' frees have arrived).
//
// Failed calls during the load are counted in the report, not returned as an
// error; errors are for runs that could not be made (config, workload,
// engines, registration, readiness, fill, /loads).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	prompts, desc, err := LoadWorkload(&cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "workload %s\n", desc)

	loop := "closed"
	if cfg.Rate > 0 {
		loop = "open"
	}
	rep := &Report{
		Loop: loop, Concurrency: cfg.Concurrency, Rate: cfg.Rate,
		Mix: cfg.Mix.String(), Workload: desc, PromptForm: cfg.PromptForm, Workers: cfg.Workers, BlockSize: cfg.BlockSize,
		WarmupS: cfg.Warmup.Seconds(), DurationS: cfg.Duration.Seconds(), Seed: cfg.Seed,
	}
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	params := loadParams{
		concurrency: cfg.Concurrency, rate: cfg.Rate, warmup: cfg.Warmup, duration: cfg.Duration,
		mix: cfg.Mix, outputBlocks: cfg.OutputBlocks, blockSize: cfg.BlockSize, progress: cfg.Progress,
	}

	if cfg.Baseline == "noop" {
		url, stop, err := StartNoop("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(logw, "no-op baseline at %s\n", url)
		p := params
		p.label, p.idPrefix = "no-op", "bench-"+nonce+"-noop"
		res, _, _, err := drive(ctx, "noop", []string{url}, &cfg, p, prompts, nil)
		stop()
		if err != nil {
			return nil, err
		}
		rep.Baseline = &res
	}

	if cfg.Replicas > 1 {
		p := params
		p.label, p.idPrefix = "1 replica", "bench-"+nonce+"-one"
		one, err := runSelector(ctx, cfg, p, prompts, 1, false, logw)
		if err != nil {
			return nil, err
		}
		rep.Replicas = &ReplicaReport{Replicas: cfg.Replicas, Single: &one.res, SingleLeaked: one.leaked}
	}

	p := params
	p.label, p.idPrefix = "selector", "bench-"+nonce
	replicas := 0 // the one selector: Target or StartServer
	if cfg.Replicas > 1 {
		p.label, replicas = strconv.Itoa(cfg.Replicas)+" replicas", cfg.Replicas
	}
	out, err := runSelector(ctx, cfg, p, prompts, replicas, cfg.ProfileDir != "", logw)
	if err != nil {
		return nil, err
	}
	rep.Target = out.target
	rep.Result = out.res
	rep.LeakedReservations = out.leaked
	rep.Fill = out.fill
	rep.Profiles, rep.Warnings = out.profiles, out.warnings
	if rr := rep.Replicas; rr != nil {
		rr.ThroughputRatio = ratio(rep.ThroughputRPS, rr.Single.ThroughputRPS)
		rr.P99Ratio = ratio(rep.P99ms, rr.Single.P99ms)
		if c, c1 := rep.Client.ProcessCPUCores, rr.Single.Client.ProcessCPUCores; c > 0 && c1 > 0 {
			rr.PerCPURatio = ratio(rep.ThroughputRPS/c, rr.Single.ThroughputRPS/c1)
		}
		rr.Propagation, rr.Counters = out.prop, out.counters
	}
	rep.setRatios()
	return rep, nil
}

// selectorOutcome is what runSelector measured.
type selectorOutcome struct {
	target             string
	res                Result
	leaked             int64 // -1: unknown (see warnings)
	fill               *FillStats
	prop               *Propagation
	counters           []map[string]uint64
	profiles, warnings []string
}

// runSelector is step 4 of Run (and 3, with replicas 1): engines, the
// selector (replicas 0: cfg.Target or cfg.StartServer; n >= 1:
// cfg.StartReplicas(n)), registration, fill, load, leak check; with
// profile, the profiles of the measured window; with n > 1, the
// propagation probe during it. Each call starts its own engines, so every
// configuration's fill starts from empty pools.
func runSelector(ctx context.Context, cfg Config, p loadParams, prompts []Prompt, replicas int, profile bool, logw io.Writer) (selectorOutcome, error) {
	var out selectorOutcome
	var prepare func([]*Control) error
	if cfg.EngineBlocks > 0 && len(cfg.KVEventsEndpoints) == 0 {
		engines, err := startEngines(&cfg)
		if err != nil {
			return out, err
		}
		defer closeEngines(engines)
		if cfg.Fill {
			prepare = func(ctls []*Control) error {
				st, err := fill(ctx, ctls, &cfg, engines, prompts, logw)
				out.fill = &st
				return err
			}
		}
	}

	var urls []string
	var reps []Replica
	if replicas == 0 {
		base, stop, err := ResolveTarget(&cfg, logw)
		if err != nil {
			return out, err
		}
		defer stop()
		urls = []string{base}
	} else {
		rs, stop, err := cfg.StartReplicas(replicas)
		if err != nil {
			return out, fmt.Errorf("bench: starting %d in-process replicas: %w", replicas, err)
		}
		defer stop()
		reps = rs
		for _, r := range rs {
			urls = append(urls, r.URL)
		}
		fmt.Fprintf(logw, "in-process replicas at %v\n", urls)
	}
	out.target = strings.Join(urls, " ")

	var atStart []func()
	var profDone chan struct{}
	var profStarted bool // set by atMeasureStart, which runs on the driver's goroutine
	if profile {
		pprofBase := cfg.PprofURL
		if pprofBase == "" {
			pprofBase = urls[0] + "/debug/pprof"
		}
		profDone = make(chan struct{})
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		atStart = append(atStart, func() {
			profStarted = true
			go func() {
				defer close(profDone)
				out.profiles, out.warnings = captureProfiles(pctx, pprofBase, cfg.ProfileDir, cfg.Duration)
			}()
		})
	}
	var pr *prober
	var probeStarted bool // as profStarted
	if len(reps) > 1 {
		var err error
		if pr, err = newProber(reps, prompts, p.idPrefix, &cfg); err != nil {
			return out, err
		}
		atStart = append(atStart, func() {
			probeStarted = true
			pr.start(ctx, cfg.Duration)
		})
	}
	if len(atStart) > 0 {
		p.atMeasureStart = func() {
			for _, f := range atStart {
				f()
			}
		}
	}
	res, leaked, loadsErr, err := drive(ctx, "selector", urls, &cfg, p, prompts, prepare)
	if profStarted {
		<-profDone // the window has passed; the fetches end with it
	}
	if pr != nil {
		if probeStarted {
			out.prop = pr.wait()
		} else {
			pr.close()
		}
	}
	if err != nil {
		return out, err
	}
	for _, r := range reps {
		out.counters = append(out.counters, r.Probe.Counters())
	}
	if replicas == 1 {
		out.counters = nil
	}
	out.res, out.leaked = res, leaked
	if loadsErr != nil {
		// The load was measured; only the leak check is unknown, which the
		// report must not pass off as zero.
		out.leaked = -1
		out.warnings = append(out.warnings, fmt.Sprintf("leak check failed (leaked_reservations -1): %v", loadsErr))
	}
	return out, nil
}

// settleWait bounds how long the leak check waits for the replicas' mirrors
// to be freed by their peers' frees.
const settleWait = 5 * time.Second

// drive registers the workers with every target, waits for each to be
// ready, calls prepare (when not nil), runs the load (spread over the
// targets, see multiCaller), and returns the result and the active
// requests left in GET /loads afterwards, summed over the targets (or
// loadsErr when /loads could not be read). err is for a run that could not
// be made.
func drive(ctx context.Context, name string, urls []string, cfg *Config, p loadParams, prompts []Prompt, prepare func([]*Control) error) (res Result, leaked int64, loadsErr, err error) {
	var targets []*target
	var ctls []*Control
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for i, url := range urls {
		n := name
		if len(urls) > 1 {
			n += " " + strconv.Itoa(i)
		}
		t, err := newTarget(n, url, cfg.Concurrency+16, cfg.Timeout)
		if err != nil {
			return Result{}, 0, nil, err
		}
		targets = append(targets, t)
		ctl := &Control{t: t, timeout: cfg.Timeout}
		if err := register(ctl, cfg); err != nil {
			return Result{}, 0, nil, err
		}
		ctls = append(ctls, ctl)
	}
	if prepare != nil {
		if err := prepare(ctls); err != nil {
			return Result{}, 0, nil, err
		}
	}
	var callers []*httpCaller // newCaller runs on runLoad's caller's goroutine
	res = runLoad(ctx, p, prompts, func(g int) caller {
		if len(targets) == 1 {
			c := targets[0].newCaller()
			callers = append(callers, c)
			return c
		}
		m := &multiCaller{next: g % len(targets)}
		for _, t := range targets {
			c := t.newCaller()
			callers = append(callers, c)
			m.cs = append(m.cs, c)
		}
		return m
	})
	for _, c := range callers {
		c.release()
	}
	wait := time.Duration(0)
	if len(ctls) > 1 {
		wait = settleWait
	}
	leaked, loadsErr = settleActive(ctls, wait)
	return res, leaked, loadsErr, nil
}

// ResolveTarget returns the selector's base URL: cfg.Target, or a server
// started with cfg.StartServer (ErrNoServer when there is neither), logged
// to logw. The caller must call stop when done with it.
func ResolveTarget(cfg *Config, logw io.Writer) (base string, stop func(), err error) {
	if cfg.Target != "" {
		return cfg.Target, func() {}, nil
	}
	if cfg.StartServer == nil {
		return "", nil, ErrNoServer
	}
	url, stop, err := cfg.StartServer()
	if err != nil {
		return "", nil, fmt.Errorf("bench: starting the in-process server: %w", err)
	}
	fmt.Fprintf(logw, "in-process selector at %s\n", url)
	return url, stop, nil
}
