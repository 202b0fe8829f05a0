package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/engines"
	"github.com/kvselect/kvselect/perf"
)

// engineScrape is serve's scrape of the workers' engine metrics
// (--engine-metrics-interval): every worker with an http(s) endpoint is
// read at {endpoint}/metrics, and the LoRA adapters its engine runs or
// queues become its engine-reported adapters (core.Service.
// SetEngineAdapters). A scrape that fails clears them (what the engine
// serves is unknown), logged once per worker until it answers again.
type engineScrape struct {
	sc     *engines.Scraper
	cancel context.CancelFunc
	done   chan struct{}
}

func startEngineScrape(svc *core.Service, interval time.Duration, log *slog.Logger) *engineScrape {
	var mu sync.Mutex
	failing := map[uint64]bool{} // guarded by mu: the workers whose last scrape failed
	targets := func() []engines.Target {
		var out []engines.Target
		for _, r := range svc.ListWorkers("", "") {
			if ep := deref(r.Endpoint); strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://") {
				out = append(out, engines.Target{ID: r.WorkerID, URL: strings.TrimSuffix(ep, "/") + "/metrics"})
			}
		}
		return out
	}
	report := func(t engines.Target, s engines.Sample, err error) {
		mu.Lock()
		was := failing[t.ID]
		failing[t.ID] = err != nil
		mu.Unlock()
		if err != nil {
			svc.SetEngineAdapters(t.ID, nil)
			if !was {
				log.Warn("engine metrics: scrape failed; the worker's engine-reported LoRA adapters are cleared until it answers", "worker_id", t.ID, "url", t.URL, "err", err)
			}
			return
		}
		if was {
			log.Info("engine metrics: scrape answers again", "worker_id", t.ID, "url", t.URL)
		}
		svc.SetEngineAdapters(t.ID, s.Adapters())
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engineScrape{sc: engines.New(engines.Config{Interval: interval}, targets, report), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.sc.Run(ctx)
	}()
	return e
}

// stop ends the scrapes and waits for those in flight.
func (e *engineScrape) stop() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

var engineScrapeDescs = []perf.Desc{
	{Name: "kvselect_engine_scrapes_total", Kind: perf.Counter, Help: "Scrapes of the workers' engine metrics (--engine-metrics-interval), by outcome: ok or failed."},
}

func writeEngineScrapeMetrics(w io.Writer, st engines.Stats) {
	perf.WriteCounter(w, `kvselect_engine_scrapes_total{outcome="ok"}`, st.OK)
	perf.WriteCounter(w, `kvselect_engine_scrapes_total{outcome="failed"}`, st.Failed)
}
