// Package engines reads the inference engines' own Prometheus metrics: the
// requests they run and queue, their KV-cache utilisation and the LoRA
// adapters they serve, scraped from each engine's /metrics on an interval.
// It knows nothing of kvselect's domain: a host hands it the targets and
// receives each scrape's Sample (the selector feeds the LoRA adapters to
// core.Service.SetEngineAdapters).
//
// The family names are the engines' (the Gateway API Inference Extension's
// model-server protocol, docs/proposals/003-model-server-protocol, and
// llm-d's extractor defaults): vLLM's vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc (vllm:
// gpu_cache_usage_perc before vLLM renamed it) and vllm:lora_requests_info;
// SGLang's sglang:num_running_reqs, sglang:num_queue_reqs and
// sglang:token_usage. A family an engine does not export is absent from
// the Sample, not an error: vllm:lora_requests_info appears only once an
// adapter has loaded.
package engines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sample is what one scrape of an engine read. Has* say whether the
// family was present. Running and Waiting sum the series (one per engine
// core of a data-parallel server); KVUsage averages them (0 to 1).
type Sample struct {
	Running, Waiting       float64
	HasRunning, HasWaiting bool
	KVUsage                float64
	HasKVUsage             bool
	// The LoRA adapters running and waiting, and the engine's max_lora,
	// from the vllm:lora_requests_info series of the latest timestamp
	// (the gauge's value).
	LoraRunning, LoraWaiting []string
	MaxLora                  int
	HasLora                  bool
}

// Adapters is every adapter the engine runs or has queued: the ones a
// request naming one can use without a new load (a waiting one loads
// next).
func (s *Sample) Adapters() []string {
	out := append([]string(nil), s.LoraRunning...)
	for _, a := range s.LoraWaiting {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ErrMalformed wraps a line the parser cannot read.
var ErrMalformed = errors.New("engines: malformed exposition line")

// Parse reads a Prometheus text exposition (version 0.0.4) for the
// families above. Other families, comments and blank lines are skipped; a
// line of a wanted family that does not parse is an error.
func Parse(body []byte) (Sample, error) {
	var s Sample
	var kvSum float64
	var kvN int
	loraTS := -1.0
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		end := bytes.IndexAny(line, "{ \t")
		if end < 0 {
			return s, fmt.Errorf("%w: %q", ErrMalformed, line)
		}
		name := string(line[:end])
		kind := familyOf(name)
		if kind == famNone {
			continue
		}
		labels, rest, err := parseLabels(line[end:])
		if err != nil {
			return s, fmt.Errorf("%w: %q: %v", ErrMalformed, line, err)
		}
		fields := strings.Fields(string(rest))
		if len(fields) == 0 || len(fields) > 2 {
			return s, fmt.Errorf("%w: %q: want a value and an optional timestamp", ErrMalformed, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return s, fmt.Errorf("%w: %q: %v", ErrMalformed, line, err)
		}
		switch kind {
		case famRunning:
			s.Running, s.HasRunning = s.Running+v, true
		case famWaiting:
			s.Waiting, s.HasWaiting = s.Waiting+v, true
		case famKV:
			kvSum, kvN = kvSum+v, kvN+1
		case famLora:
			if v < loraTS {
				continue
			}
			loraTS = v
			s.HasLora = true
			s.LoraRunning = splitAdapters(labels["running_lora_adapters"])
			s.LoraWaiting = splitAdapters(labels["waiting_lora_adapters"])
			s.MaxLora, _ = strconv.Atoi(labels["max_lora"])
		}
	}
	if kvN > 0 {
		s.KVUsage, s.HasKVUsage = kvSum/float64(kvN), true
	}
	return s, nil
}

type family uint8

const (
	famNone family = iota
	famRunning
	famWaiting
	famKV
	famLora
)

func familyOf(name string) family {
	switch name {
	case "vllm:num_requests_running", "sglang:num_running_reqs":
		return famRunning
	case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
		return famWaiting
	case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage":
		return famKV
	case "vllm:lora_requests_info":
		return famLora
	}
	return famNone
}

// parseLabels reads an optional {name="value",...} at the start of b and
// returns the labels and what follows.
func parseLabels(b []byte) (map[string]string, []byte, error) {
	if len(b) == 0 || b[0] != '{' {
		return nil, b, nil
	}
	labels := map[string]string{}
	i := 1
	for {
		for i < len(b) && (b[i] == ' ' || b[i] == ',') {
			i++
		}
		if i < len(b) && b[i] == '}' {
			return labels, b[i+1:], nil
		}
		eq := bytes.IndexByte(b[i:], '=')
		if eq < 0 {
			return nil, nil, errors.New("label without =")
		}
		key := string(bytes.TrimSpace(b[i : i+eq]))
		i += eq + 1
		if i >= len(b) || b[i] != '"' {
			return nil, nil, errors.New("label value not quoted")
		}
		i++
		var val []byte
		for ; ; i++ {
			if i >= len(b) {
				return nil, nil, errors.New("unterminated label value")
			}
			c := b[i]
			if c == '"' {
				i++
				break
			}
			if c == '\\' && i+1 < len(b) {
				i++
				switch b[i] {
				case 'n':
					c = '\n'
				default:
					c = b[i] // \\ and \"
				}
			}
			val = append(val, c)
		}
		labels[key] = string(val)
	}
}

// splitAdapters splits a comma list, trimmed, without empty names.
func splitAdapters(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Target is one engine to scrape: a host's id for it and its metrics URL.
type Target struct {
	ID  uint64
	URL string
}

// Config configures a Scraper. Zero values pick the defaults.
type Config struct {
	// Interval between two scrapes of the targets (default 1 s).
	Interval time.Duration
	// Timeout of one scrape (default the interval, at most 5 s).
	Timeout time.Duration
	// Concurrency bounds the scrapes in flight (default 16).
	Concurrency int
	// MaxBody bounds the bytes read of one exposition (default 8 MiB);
	// a longer one fails the scrape.
	MaxBody int64
}

// Stats counts scrapes by outcome.
type Stats struct {
	OK, Failed uint64
}

// Scraper scrapes the targets on its interval and reports each result.
type Scraper struct {
	cfg     Config
	targets func() []Target
	report  func(Target, Sample, error)
	client  *http.Client
	ok      atomic.Uint64
	failed  atomic.Uint64
}

// New returns a scraper of the targets returns, calling report with each
// scrape's sample or error (from the scraping goroutines, concurrently).
func New(cfg Config, targets func() []Target, report func(Target, Sample, error)) *Scraper {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = min(cfg.Interval, 5*time.Second)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 8 << 20
	}
	return &Scraper{cfg: cfg, targets: targets, report: report, client: &http.Client{Timeout: cfg.Timeout}}
}

// Run scrapes every interval until ctx ends; it returns once no scrape is
// in flight.
func (s *Scraper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once scrapes every target once, Concurrency at a time.
func (s *Scraper) Once(ctx context.Context) {
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, tg := range s.targets() {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			smp, err := s.scrape(ctx, tg.URL)
			if ctx.Err() != nil {
				return // stopping: a cancelled scrape says nothing of the engine
			}
			if err != nil {
				s.failed.Add(1)
			} else {
				s.ok.Add(1)
			}
			s.report(tg, smp, err)
		}()
	}
	wg.Wait()
}

func (s *Scraper) scrape(ctx context.Context, url string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := s.client.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("engines: %s answered %d", url, res.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, s.cfg.MaxBody+1))
	if err != nil {
		return Sample{}, err
	}
	if int64(len(body)) > s.cfg.MaxBody {
		return Sample{}, fmt.Errorf("engines: %s: exposition over %d bytes", url, s.cfg.MaxBody)
	}
	return Parse(body)
}

// Stats returns the scrape counts.
func (s *Scraper) Stats() Stats { return Stats{OK: s.ok.Load(), Failed: s.failed.Load()} }
