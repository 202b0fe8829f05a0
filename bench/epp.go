package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/bench/extproc"
)

// EPPReport is the epp mix's own section of a Report.
type EPPReport struct {
	// Conns is the gRPC connections of the client to each server.
	Conns int `json:"conns"`
	// MaxPromptTokens is the workload's longest prompt: at most
	// ShortPromptTokens makes the run the short-prompt target's.
	MaxPromptTokens int `json:"max_prompt_tokens"`
	// Dests counts the picks of the measured window by destination.
	Dests map[string]int64 `json:"dests"`
	// Tokenizer is the picker's tokenizer caches over the measured
	// window (kvselect_tokenizer_cache_{hits,misses}_total by cache),
	// nil without a tokenizer.
	Tokenizer map[string]CacheWindow `json:"tokenizer_cache,omitempty"`
}

// CacheWindow is one cache's lookups over the measured window.
type CacheWindow struct {
	Hits    float64 `json:"hits"`
	Misses  float64 `json:"misses"`
	HitRate float64 `json:"hit_rate"`
}

// ShortPromptTokens bounds the prompts of the epp mix's short-prompt
// target (issue 23: "with short prompts, 256 tokens or fewer").
const ShortPromptTokens = 256

// The epp mix's targets with short prompts: at least eppMinThroughput of
// the no-op processor's throughput, at most eppMaxP99 times its p99.
const (
	eppMinThroughput = 0.5
	eppMaxP99        = 2.0
)

// eppCaller is one client goroutine's stream driver.
type eppCaller struct {
	s       *extproc.Stream
	timeout time.Duration
	dests   map[string]int64 // picks by destination, every operation's
}

func (c *eppCaller) call(r route, _, body []byte) (int, error) {
	if r != routeEPP {
		panic("BUG: bench: an eppCaller makes ext_proc streams only")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	code, err := c.s.Run(ctx, body)
	if code == 200 {
		c.dests[c.s.Dest]++
	}
	return code, err
}

// eppOp is the response side of an operation: OutputBlocks chunks of one
// block of tokens each, so that every chunk is one output block to the
// picker (its lifecycle's output_block call).
func eppOp(cfg *Config) extproc.Op {
	return extproc.Op{Chunks: cfg.OutputBlocks, EventsPerChunk: cfg.BlockSize}
}

// measureEPP drives one window over c, returning the slice and the picks
// by destination.
func measureEPP(ctx context.Context, c *extproc.Client, cfg *Config, p loadParams, prompts []Prompt) (loadSlice, map[string]int64) {
	var callers []*eppCaller
	sl := runSlice(ctx, p, prompts, func(g int) caller {
		ec := &eppCaller{s: c.NewStream(g, eppOp(cfg)), timeout: cfg.Timeout, dests: map[string]int64{}}
		callers = append(callers, ec)
		return ec
	})
	dests := map[string]int64{}
	for _, ec := range callers {
		for d, n := range ec.dests {
			dests[d] += n
		}
	}
	return sl, dests
}

// openAIBody is a prompt's OpenAI completions body: the text form's body
// as it is (`{"prompt": "..."}`, which the picker tokenizes), else the
// prompt's tokens as a prompt of token ids, as vLLM takes them.
func openAIBody(p *Prompt, form string) []byte {
	if form == PromptText {
		return p.Body
	}
	b := []byte(`{"stream":true,"prompt":[`) // no model: core's default partition, the workers'
	for i, t := range p.AppendAllTokens(nil) {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	return append(b, "]}"...)
}

// runEPP is Run with MixEPP:
//
//  1. every prompt gets its OpenAI body (openAIBody);
//  2. the no-op ext_proc server (extproc.StartNoop) is driven by the same
//     client, streams and bodies: the baseline, always measured;
//  3. one simulated engine per worker is started (with EngineBlocks), the
//     workers are written to a workers file, and the picker is started
//     on it (cfg.StartEPP) and awaited on GET /ready: its catalog comes
//     from the file, as `kvselect epp --workers-file` runs off-cluster;
//  4. with Fill, the engines and the picker's index are filled from the
//     workload, each prompt routed by one ext_proc stream (eppPick);
//  5. the picker is driven (profiled with ProfileDir), its tokenizer
//     caches read before and after the window;
//  6. GET /loads reads what was left booked: every stream ends only
//     after the picker returned, so nothing is in flight.
func runEPP(ctx context.Context, cfg *Config, rep *Report, params loadParams, prompts []Prompt, nonce string, logw io.Writer) error {
	conns := cfg.EPPConns
	if conns == 0 {
		conns = 4
	}
	er := &EPPReport{Conns: conns}
	for i := range prompts {
		prompts[i].openAI = openAIBody(&prompts[i], cfg.PromptForm)
		er.MaxPromptTokens = max(er.MaxPromptTokens, prompts[i].ISL)
	}
	rep.EPP = er

	addr, stopNoop, err := extproc.StartNoop("127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "no-op ext_proc baseline at %s\n", addr)
	nc, err := extproc.Dial(addr, conns)
	if err != nil {
		stopNoop()
		return err
	}
	p := params
	p.label = "no-op"
	var stopProfile func() (string, string)
	if cfg.ProfileDir != "" {
		p.atMeasureStart, stopProfile = baselineProfile(cfg.ProfileDir)
	}
	sl, _ := measureEPP(ctx, nc, cfg, p, prompts)
	if stopProfile != nil {
		rep.addProfile(stopProfile())
	}
	_ = nc.Close()
	stopNoop()
	base := mergeSlices(p, []loadSlice{sl})
	rep.Baseline = &base

	var es []*Engine
	if cfg.EngineBlocks > 0 {
		if es, err = startEngines(cfg); err != nil {
			return err
		}
		defer func() { _ = closeEngines(es) }()
	}
	dir, err := os.MkdirTemp("", "kvselect-bench-epp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "workers.json")
	if err := writeJSONFile(file, struct {
		Workers []WorkerRequest `json:"workers"`
	}{workerRequests(cfg)}); err != nil {
		return err
	}
	srv, err := cfg.StartEPP(file)
	if err != nil {
		return fmt.Errorf("bench: starting the in-process endpoint picker: %w", err)
	}
	defer srv.Stop()
	fmt.Fprintf(logw, "in-process endpoint picker: ext_proc %s, HTTP %s\n", srv.GRPCAddr, srv.URL)
	if cfg.PprofURL == "" {
		cfg.PprofURL = srv.PprofURL
	}
	ctl, err := NewControl("epp", srv.URL, cfg.Timeout)
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.WaitReady(cfg.ReadyTimeout); err != nil {
		return err
	}
	ec, err := extproc.Dial(srv.GRPCAddr, conns)
	if err != nil {
		return err
	}
	defer ec.Close()
	if cfg.Fill && es != nil {
		st, err := fill(ctx, []*Control{ctl}, cfg, es, prompts, eppPick(ec, cfg, prompts), logw)
		if err != nil {
			return err
		}
		rep.Fill = &st
	}
	p = params
	p.label, p.idPrefix = "epp", "bench-"+nonce
	var waitProfiles func() ([]string, []string)
	if cfg.ProfileDir != "" {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if p.atMeasureStart, waitProfiles, err = profileAt(pctx, cfg, cfg.Duration); err != nil {
			return err
		}
	}
	before, err := tokenizerCaches(ctl)
	if err != nil {
		return err
	}
	sl, dests := measureEPP(ctx, ec, cfg, p, prompts)
	rep.Result = mergeSlices(p, []loadSlice{sl})
	er.Dests = dests
	if waitProfiles != nil {
		files, warns := waitProfiles()
		rep.Profiles, rep.Warnings = append(rep.Profiles, files...), append(rep.Warnings, warns...)
	}
	after, err := tokenizerCaches(ctl)
	if err != nil {
		return err
	}
	for name, a := range after {
		b := before[name]
		w := CacheWindow{Hits: a.Hits - b.Hits, Misses: a.Misses - b.Misses}
		w.HitRate = ratio(w.Hits, w.Hits+w.Misses)
		if er.Tokenizer == nil {
			er.Tokenizer = map[string]CacheWindow{}
		}
		er.Tokenizer[name] = w
	}
	rep.Target = "epp ext_proc " + srv.GRPCAddr
	rep.LeakedReservations = leakCheck(&loadTarget{ctls: []*Control{ctl}}, &rep.Warnings)
	return nil
}

// eppPick routes a fill prompt with one ext_proc stream of its OpenAI
// body (the booking it makes is freed when the stream ends) and reads
// the worker from the destination, bench-worker-ID:8000
// (workerRequests' endpoints).
func eppPick(c *extproc.Client, cfg *Config, prompts []Prompt) fillPick {
	s := c.NewStream(0, extproc.Op{})
	return func(ctx context.Context, i int, _ []byte) (uint64, uint32, error) {
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		code, err := s.Run(ctx, prompts[i].openAI)
		if err != nil || code != 200 {
			return 0, 0, fmt.Errorf("ext_proc stream: status %d: %v", code, err)
		}
		host, _, _ := strings.Cut(s.Dest, ":")
		id, err := strconv.ParseUint(strings.TrimPrefix(host, "bench-worker-"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("destination %q is not a harness worker's", s.Dest)
		}
		return id, 0, nil
	}
}

// tokenizerCaches reads the picker's tokenizer cache counters by cache
// (word, chunk), summed over models.
func tokenizerCaches(c *Control) (map[string]CacheWindow, error) {
	body, err := c.Call("GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	out := map[string]CacheWindow{}
	for _, line := range strings.Split(string(body), "\n") {
		hits := strings.HasPrefix(line, "kvselect_tokenizer_cache_hits_total{")
		if !hits && !strings.HasPrefix(line, "kvselect_tokenizer_cache_misses_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `cache="`)
		name, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if name == "" || len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: GET /metrics: %q: %w", line, err)
		}
		w := out[name]
		if hits {
			w.Hits += v
		} else {
			w.Misses += v
		}
		out[name] = w
	}
	return out, nil
}

// writeEPPSection prints the epp mix's section and its target line.
func writeEPPSection(out io.Writer, rep *Report) {
	er := rep.EPP
	if er == nil {
		return
	}
	fmt.Fprintf(out, "epp: %d gRPC connections per server, longest prompt %d tokens, picks by destination: %s\n",
		er.Conns, er.MaxPromptTokens, formatCounts(er.Dests))
	for _, name := range []string{"word", "chunk"} {
		if w, ok := er.Tokenizer[name]; ok {
			fmt.Fprintf(out, "epp: tokenizer %s cache over the window: %.0f hits, %.0f misses, hit rate %.3f\n", name, w.Hits, w.Misses, w.HitRate)
		}
	}
	if rep.Ratios == nil || rep.Loop != "closed" {
		return
	}
	if er.MaxPromptTokens <= ShortPromptTokens {
		fmt.Fprintf(out, "targets (C%d epp, prompts <= %d tokens): throughput ratio %.2f (>= %.2f %s), p99 ratio %.2f (<= %.1f %s), errors %d (%s), leaked %d (%s)\n",
			rep.Concurrency, ShortPromptTokens, rep.Ratios.Throughput, eppMinThroughput, okIf(rep.Ratios.Throughput >= eppMinThroughput),
			rep.Ratios.P99, eppMaxP99, okIf(rep.Ratios.P99 <= eppMaxP99),
			rep.ErrorCount(), okIf(rep.ErrorCount() == 0), rep.LeakedReservations, okIf(rep.LeakedReservations == 0))
		return
	}
	fmt.Fprintf(out, "targets (C%d epp, long prompts, up to %d tokens): throughput ratio %.2f, p99 ratio %.2f (reported; the share of CPU spent tokenizing is in --profile's cpu profile), errors %d (%s), leaked %d (%s)\n",
		rep.Concurrency, er.MaxPromptTokens, rep.Ratios.Throughput, rep.Ratios.P99,
		rep.ErrorCount(), okIf(rep.ErrorCount() == 0), rep.LeakedReservations, okIf(rep.LeakedReservations == 0))
}
