package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
//  2. with Baseline "noop": start the no-op server on loopback and register
//     the workers there, to drive it with the same client, mix and prompts;
//  3. open the selector (openTarget): with EngineBlocks, start one
//     simulated engine per worker; resolve the selector (cfg.Target, or
//     cfg.StartServer when Target is empty, ErrNoServer when neither is
//     given); register the workers, wait for GET /ready; with Fill, fill
//     the engines' pools and the selector's index from the workload;
//  4. drive it (capturing profiles during its measured window when
//     ProfileDir is set); with the baseline, the two are driven in
//     Config.Rounds alternating windows (runRounds);
//  5. read GET /loads for reservations left active.
//
// With MixEPP, steps 2 to 5 run runEPP instead: the no-op ext_proc server
// and the in-process endpoint picker. With Replicas > 1, steps 3 to 5 run
// runReplicas instead: one replica
// alone and the meshed replicas, measured in alternating windows.
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

	if cfg.Mix == MixEPP {
		// The epp mix brings its own baseline and target (runEPP).
		if err := runEPP(ctx, &cfg, rep, params, prompts, nonce, logw); err != nil {
			return nil, err
		}
		rep.setRatios()
		return rep, nil
	}

	var noopT *loadTarget
	if cfg.Baseline == "noop" {
		noop := func() ([]string, []Replica, func(), error) {
			url, stop, err := StartNoop("127.0.0.1:0")
			if err == nil {
				fmt.Fprintf(logw, "no-op baseline at %s\n", url)
			}
			return []string{url}, nil, stop, err
		}
		if noopT, err = openTarget(ctx, cfg, "noop", noop, false, 1, prompts, logw); err != nil {
			return nil, err
		}
		defer noopT.close()
	}

	if cfg.Replicas > 1 {
		if noopT != nil {
			p := params
			p.label, p.idPrefix = "no-op", "bench-"+nonce+"-noop"
			res := mergeSlices(p, []loadSlice{noopT.measure(ctx, p, prompts)})
			rep.Baseline = &res
		}
		if err := runReplicas(ctx, &cfg, rep, params, prompts, nonce, logw); err != nil {
			return nil, err
		}
		rep.setRatios()
		return rep, nil
	}

	lt, err := openTarget(ctx, cfg, "selector", selectorStart(&cfg, 0, logw), true, 1, prompts, logw)
	if err != nil {
		return nil, err
	}
	defer lt.close()
	if err := runRounds(ctx, &cfg, rep, params, prompts, nonce, noopT, lt); err != nil {
		return nil, err
	}
	rep.Target, rep.Fill = lt.label(), lt.fill
	rep.LeakedReservations = leakCheck(lt, &rep.Warnings)
	rep.setRatios()
	return rep, nil
}

// runRounds measures the selector lt and, when noopT is not nil, the no-op
// baseline in cfg.Rounds alternating windows of cfg.Duration/Rounds, the
// baseline first in each, for the reason runReplicas gives: a ratio of two
// windows a run apart took whatever else the machine did in each (runs on
// a quiet machine moved the hash-body ratio from 0.73 to 0.87). Without a
// baseline it is one window. Profiles cover each target's first window.
func runRounds(ctx context.Context, cfg *Config, rep *Report, params loadParams, prompts []Prompt, nonce string, noopT, lt *loadTarget) error {
	rounds := 1
	if noopT != nil {
		rounds = max(1, cfg.Rounds)
	}
	slice := cfg.Duration / time.Duration(rounds)
	var noopSlices, selSlices []loadSlice
	var waitProfiles func() ([]string, []string)
	for r := range rounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, tag := roundParams(params, cfg, slice, r, rounds)
		if noopT != nil {
			p0 := p
			p0.label, p0.idPrefix = "no-op"+tag, fmt.Sprintf("bench-%s-noop-r%d", nonce, r)
			var stopProfile func() (string, string)
			if r == 0 && cfg.ProfileDir != "" {
				p0.atMeasureStart, stopProfile = baselineProfile(cfg.ProfileDir)
			}
			noopSlices = append(noopSlices, noopT.measure(ctx, p0, prompts))
			if stopProfile != nil {
				rep.addProfile(stopProfile())
			}
		}
		p1 := p
		p1.label, p1.idPrefix = "selector"+tag, fmt.Sprintf("bench-%s-r%d", nonce, r)
		if r == 0 && cfg.ProfileDir != "" {
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var err error
			if p1.atMeasureStart, waitProfiles, err = profileAt(pctx, cfg, slice); err != nil {
				return err
			}
		}
		selSlices = append(selSlices, lt.measure(ctx, p1, prompts))
	}
	if noopT != nil {
		res := mergeSlices(params, noopSlices)
		rep.Baseline = &res
	}
	rep.Result = mergeSlices(params, selSlices)
	if waitProfiles != nil {
		files, warns := waitProfiles()
		rep.Profiles, rep.Warnings = append(rep.Profiles, files...), append(rep.Warnings, warns...)
	}
	return nil
}

// roundParams is round r of rounds' load: slice long, after the full
// warm-up in the first round and at most a second in the others (the
// connections are open by then), and its label's tag (" r/rounds", none
// with one round).
func roundParams(params loadParams, cfg *Config, slice time.Duration, r, rounds int) (loadParams, string) {
	p := params
	p.duration = slice
	if r > 0 {
		p.warmup = min(cfg.Warmup, time.Second)
	}
	if rounds == 1 {
		return p, ""
	}
	return p, fmt.Sprintf(" %d/%d", r+1, rounds)
}

// runReplicas is Run's steps 3 to 5 with cfg.Replicas > 1. It opens one
// replica alone (StartReplicas(1)) and then the meshed replicas, each with
// engines of its own and filled, both kept up, both driven by the same
// client: as many connection pools as replicas, each client goroutine
// sending its operations to the pools in turn (with one replica, every
// pool reaches it), so that the ratio compares the servers, not two
// shapes of client. Then it measures them in
// cfg.Rounds alternating windows, one replica first, each of
// cfg.Duration/Rounds after a warm-up (cfg.Warmup before each target's
// first window, at most a second before the others: the connections are
// open by then). Background work on a shared machine changes over seconds;
// alternating puts both targets under the same changes, where one long
// window each would give the second target whatever the machine did then.
// The propagation probe runs during the replicas' windows; profiles are
// captured during their first window. The top-level figures of rep are the
// replicas', rep.Replicas compares them with the one replica.
func runReplicas(ctx context.Context, cfg *Config, rep *Report, params loadParams, prompts []Prompt, nonce string, logw io.Writer) error {
	one, err := openTarget(ctx, *cfg, "1 replica", selectorStart(cfg, 1, logw), true, cfg.Replicas, prompts, logw)
	if err != nil {
		return err
	}
	defer one.close()
	mesh, err := openTarget(ctx, *cfg, "replica", selectorStart(cfg, cfg.Replicas, logw), true, cfg.Replicas, prompts, logw)
	if err != nil {
		return err
	}
	defer mesh.close()
	pr, err := newProber(mesh.reps, prompts, "bench-"+nonce, cfg)
	if err != nil {
		return err
	}
	defer pr.close()
	// The other bus's replicas (cfg.StartAltReplicas), when given.
	var alt *loadTarget
	var altPr *prober
	if cfg.StartAltReplicas != nil {
		if alt, err = openTarget(ctx, *cfg, cfg.AltLabel+" replica", replicaStart(cfg, cfg.Replicas, true, logw), true, cfg.Replicas, prompts, logw); err != nil {
			return err
		}
		defer alt.close()
		if altPr, err = newProber(alt.reps, prompts, "bench-"+nonce+"-alt", cfg); err != nil {
			return err
		}
		defer altPr.close()
	}

	rounds := max(1, cfg.Rounds)
	slice := cfg.Duration / time.Duration(rounds)
	var oneSlices, meshSlices, altSlices []loadSlice
	var waitProfiles func() ([]string, []string)
	for r := range rounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, tag := roundParams(params, cfg, slice, r, rounds)
		p1 := p
		p1.label, p1.idPrefix = "1 replica"+tag, fmt.Sprintf("bench-%s-one-r%d", nonce, r)
		oneSlices = append(oneSlices, one.measure(ctx, p1, prompts))

		p2 := p
		p2.label, p2.idPrefix = strconv.Itoa(cfg.Replicas)+" replicas"+tag, fmt.Sprintf("bench-%s-r%d", nonce, r)
		var profStart func()
		if r == 0 && cfg.ProfileDir != "" {
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var err error
			if profStart, waitProfiles, err = profileAt(pctx, cfg, slice); err != nil {
				return err
			}
		}
		p2.atMeasureStart = func() {
			pr.start(ctx, slice)
			if profStart != nil {
				profStart()
			}
		}
		meshSlices = append(meshSlices, mesh.measure(ctx, p2, prompts))
		pr.join()

		if alt != nil {
			p3 := p
			p3.label, p3.idPrefix = strconv.Itoa(cfg.Replicas)+" "+cfg.AltLabel+" replicas"+tag, fmt.Sprintf("bench-%s-alt-r%d", nonce, r)
			var altProf func()
			if r == 0 && cfg.ProfileDir != "" {
				// The other bus's first window: its profiles go to
				// ProfileDir/alt.
				altCfg := *cfg
				altCfg.ProfileDir = filepath.Join(cfg.ProfileDir, "alt")
				if err := os.MkdirAll(altCfg.ProfileDir, 0o755); err != nil {
					return err
				}
				pctx, cancel := context.WithCancel(ctx)
				defer cancel()
				start, wait, err := profileAt(pctx, &altCfg, slice)
				if err != nil {
					return err
				}
				altProf = start
				defer func() {
					files, warns := wait()
					rep.Profiles, rep.Warnings = append(rep.Profiles, files...), append(rep.Warnings, warns...)
				}()
			}
			p3.atMeasureStart = func() {
				altPr.start(ctx, slice)
				if altProf != nil {
					altProf()
				}
			}
			altSlices = append(altSlices, alt.measure(ctx, p3, prompts))
			altPr.join()
		}
	}
	single := mergeSlices(params, oneSlices)
	rep.Result = mergeSlices(params, meshSlices)
	if waitProfiles != nil {
		files, warns := waitProfiles()
		rep.Profiles, rep.Warnings = append(rep.Profiles, files...), append(rep.Warnings, warns...)
	}
	rep.Target, rep.Fill = mesh.label(), mesh.fill
	rr := &ReplicaReport{Replicas: cfg.Replicas, Rounds: rounds, Single: &single, Propagation: pr.result()}
	rep.Replicas = rr
	rr.SingleLeaked = leakCheck(one, &rep.Warnings)
	rep.LeakedReservations = leakCheck(mesh, &rep.Warnings)
	for _, r := range mesh.reps {
		rr.Counters = append(rr.Counters, r.Probe.Counters())
	}
	if alt != nil {
		res := mergeSlices(params, altSlices)
		ar := &AltReplicaReport{Label: cfg.AltLabel, Result: &res, Propagation: altPr.result(),
			ThroughputRatio: ratio(res.ThroughputRPS, single.ThroughputRPS), P99Ratio: ratio(res.P99ms, single.P99ms),
			ThroughputToMesh: ratio(res.ThroughputRPS, rep.ThroughputRPS)}
		if c, c1 := res.Client.ProcessCPUCores, single.Client.ProcessCPUCores; c > 0 && c1 > 0 {
			ar.PerCPURatio = ratio(res.ThroughputRPS/c, single.ThroughputRPS/c1)
		}
		ar.Leaked = leakCheck(alt, &rep.Warnings)
		for _, r := range alt.reps {
			ar.Counters = append(ar.Counters, r.Probe.Counters())
		}
		rr.Alt = ar
	}
	rr.ThroughputRatio = ratio(rep.ThroughputRPS, single.ThroughputRPS)
	rr.P99Ratio = ratio(rep.P99ms, single.P99ms)
	if c, c1 := rep.Client.ProcessCPUCores, single.Client.ProcessCPUCores; c > 0 && c1 > 0 {
		rr.PerCPURatio = ratio(rep.ThroughputRPS/c, single.ThroughputRPS/c1)
	}
	return nil
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
	srv, err := cfg.StartServer()
	if err != nil {
		return "", nil, fmt.Errorf("bench: starting the in-process server: %w", err)
	}
	if cfg.PprofURL == "" {
		cfg.PprofURL = srv.PprofURL
	}
	fmt.Fprintf(logw, "in-process selector at %s\n", srv.URL)
	return srv.URL, srv.Stop, nil
}
