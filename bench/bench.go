package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
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
//     with EngineBlocks, start one simulated engine per worker;
//  2. resolve the selector: cfg.Target, or cfg.StartServer when Target is
//     empty (ErrNoServer when neither is given);
//  3. with Baseline "noop": start the no-op server on loopback, register the
//     workers there, and drive it with the same client, mix and prompts;
//  4. register the workers with the selector, wait for GET /ready; with
//     Fill, fill the engines' pools and the selector's index from the
//     workload (fill); drive it (capturing profiles during its measured
//     window when ProfileDir is set);
//  5. read GET /loads for reservations left active.
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
	var engines []*Engine
	if cfg.EngineBlocks > 0 && len(cfg.KVEventsEndpoints) == 0 {
		if engines, err = startEngines(&cfg); err != nil {
			return nil, err
		}
		defer closeEngines(engines)
	}

	base, stop, err := ResolveTarget(&cfg, logw)
	if err != nil {
		return nil, err
	}
	defer stop()

	loop := "closed"
	if cfg.Rate > 0 {
		loop = "open"
	}
	rep := &Report{
		Target: base, Loop: loop, Concurrency: cfg.Concurrency, Rate: cfg.Rate,
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
		res, _, _, err := drive(ctx, "noop", url, &cfg, p, prompts, nil)
		stop()
		if err != nil {
			return nil, err
		}
		rep.Baseline = &res
	}

	p := params
	p.label, p.idPrefix = "selector", "bench-"+nonce
	var profDone chan struct{}
	var profStarted bool // set by atMeasureStart, which runs on this goroutine
	var profFiles, profWarns []string
	if cfg.ProfileDir != "" {
		pprofBase := cfg.PprofURL
		if pprofBase == "" {
			pprofBase = base + "/debug/pprof"
		}
		profDone = make(chan struct{})
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p.atMeasureStart = func() {
			profStarted = true
			go func() {
				defer close(profDone)
				profFiles, profWarns = captureProfiles(pctx, pprofBase, cfg.ProfileDir, cfg.Duration)
			}()
		}
	}
	var prepare func(*Control) error
	if cfg.Fill {
		prepare = func(c *Control) error {
			st, err := fill(ctx, c, &cfg, engines, prompts, logw)
			rep.Fill = &st
			return err
		}
	}
	res, leaked, loadsErr, err := drive(ctx, "selector", base, &cfg, p, prompts, prepare)
	if profStarted {
		<-profDone // the window has passed; the fetches end with it
	}
	if err != nil {
		return nil, err
	}
	rep.Result = res
	rep.LeakedReservations = leaked
	rep.Profiles, rep.Warnings = profFiles, profWarns
	if loadsErr != nil {
		// The load was measured; only the leak check is unknown, which the
		// report must not pass off as zero.
		rep.LeakedReservations = -1
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("leak check failed (leaked_reservations -1): %v", loadsErr))
	}
	rep.setRatios()
	return rep, nil
}

// drive registers the workers with one target, waits for it to be ready,
// calls prepare (when not nil), runs the load, and returns the result and
// the active requests left in GET /loads afterwards (or loadsErr when
// /loads could not be read). err is for a run that could not be made.
func drive(ctx context.Context, name, url string, cfg *Config, p loadParams, prompts []Prompt, prepare func(*Control) error) (res Result, leaked int64, loadsErr, err error) {
	t, err := newTarget(name, url, cfg.Concurrency+16, cfg.Timeout)
	if err != nil {
		return Result{}, 0, nil, err
	}
	defer t.close()
	ctl := &Control{t: t, timeout: cfg.Timeout}
	if err := register(ctl, cfg); err != nil {
		return Result{}, 0, nil, err
	}
	if prepare != nil {
		if err := prepare(ctl); err != nil {
			return Result{}, 0, nil, err
		}
	}
	callers := make([]*httpCaller, p.concurrency)
	res = runLoad(ctx, p, prompts, func(g int) caller {
		callers[g] = t.newCaller()
		return callers[g]
	})
	for _, c := range callers {
		c.release()
	}
	leaked, loadsErr = ctl.ActiveRequests()
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
