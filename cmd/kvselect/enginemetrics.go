package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/httpapi/engines"
	"github.com/kvselect/kvselect/perf"
)

// engineScrape is the scrape of the workers' engine metrics
// (--engine-metrics-interval): every worker with an http(s) endpoint is
// read at {endpoint}/metrics. The LoRA adapters its engine runs or
// queues become its engine-reported adapters (core.Service.
// SetEngineAdapters); its waiting and running requests and KV-cache
// usage are kept as its last sample, for /loads (httpapi.EngineLoad) and
// the GIE pool gauges. A scrape that fails clears the adapters (what the
// engine serves is unknown), logged once per transition; with exclude
// (the EPP: a pod that stops answering is taken out of selection, as
// GIE's EPP does with a pod whose metrics are stale), the worker is also
// out of selection until its engine answers again
// (core.Service.SetEngineAvailable), counted in
// kvselect_engine_unavailable_total. serve does not exclude: its
// workers' endpoints need not serve /metrics.
type engineScrape struct {
	sc     *engines.Scraper
	cancel context.CancelFunc
	done   chan struct{}

	mu struct {
		sync.Mutex
		// last is each scraped worker's last result; entries of workers
		// that left the catalog are dropped at the next round.
		last map[uint64]engineState
		// down counts transitions to failing.
		down uint64
	}
}

// engineState is one worker's last scrape: the sample, whether it
// answered.
type engineState struct {
	s  engines.Sample
	ok bool
}

func startEngineScrape(svc *core.Service, interval time.Duration, exclude bool, log *slog.Logger) *engineScrape {
	e := &engineScrape{done: make(chan struct{})}
	e.mu.last = map[uint64]engineState{}
	targets := func() []engines.Target {
		var out []engines.Target
		seen := map[uint64]bool{}
		for _, r := range svc.ListWorkers("", "") {
			if ep := deref(r.Endpoint); strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://") {
				out = append(out, engines.Target{ID: r.WorkerID, URL: strings.TrimSuffix(ep, "/") + "/metrics"})
				seen[r.WorkerID] = true
			}
		}
		e.mu.Lock()
		for id := range e.mu.last {
			if !seen[id] {
				delete(e.mu.last, id)
			}
		}
		e.mu.Unlock()
		return out
	}
	// report runs once per target per round, rounds one after another, so
	// a worker's reports never overlap. A transition is logged before any
	// of its state is published (/loads, the counters, selection), so a
	// caller that sees the change finds the line already written.
	report := func(t engines.Target, s engines.Sample, err error) {
		e.mu.Lock()
		prev, known := e.mu.last[t.ID]
		e.mu.Unlock()
		was := known && !prev.ok
		switch {
		case err != nil && !was:
			what := "the worker's engine-reported LoRA adapters are cleared until it answers"
			if exclude {
				what = "the worker is out of selection and its engine-reported LoRA adapters cleared until it answers"
			}
			log.Warn("engine metrics: scrape failed; "+what, "worker_id", t.ID, "url", t.URL, "err", err)
		case err == nil && was:
			log.Info("engine metrics: scrape answers again", "worker_id", t.ID, "url", t.URL)
		}
		e.mu.Lock()
		e.mu.last[t.ID] = engineState{s: s, ok: err == nil}
		if err != nil && !was {
			e.mu.down++
		}
		e.mu.Unlock()
		if exclude {
			// Every round, not only on a transition: a worker re-added
			// under the same id starts available in core.
			svc.SetEngineAvailable(t.ID, err == nil)
		}
		if err != nil {
			svc.SetEngineAdapters(t.ID, nil)
			return
		}
		svc.SetEngineAdapters(t.ID, s.Adapters())
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.sc, e.cancel = engines.New(engines.Config{Interval: interval}, targets, report), cancel
	go func() {
		defer close(e.done)
		e.sc.Run(ctx)
	}()
	return e
}

// load is the worker's last scrape for /loads (httpapi.Config.EngineLoads).
func (e *engineScrape) load(id uint64) (httpapi.EngineLoad, bool) {
	e.mu.Lock()
	st, ok := e.mu.last[id]
	e.mu.Unlock()
	if !ok {
		return httpapi.EngineLoad{}, false
	}
	if !st.ok {
		return httpapi.EngineLoad{}, true
	}
	return httpapi.EngineLoad{Answering: true, Waiting: st.s.Waiting, Running: st.s.Running, KVUsage: st.s.KVUsage,
		HasWaiting: st.s.HasWaiting, HasRunning: st.s.HasRunning, HasKV: st.s.HasKVUsage}, true
}

// engineTotals are the averages over the answering workers that export
// each family (GIE's pool gauges), and the counts.
type engineTotals struct {
	avgQueue, avgKV float64
	hasQueue, hasKV bool
	failing, down   uint64
}

func (e *engineScrape) totals() engineTotals {
	e.mu.Lock()
	defer e.mu.Unlock()
	var t engineTotals
	var q, kv float64
	var nq, nkv int
	for _, st := range e.mu.last {
		if !st.ok {
			t.failing++
			continue
		}
		if st.s.HasWaiting {
			q, nq = q+st.s.Waiting, nq+1
		}
		if st.s.HasKVUsage {
			kv, nkv = kv+st.s.KVUsage, nkv+1
		}
	}
	if nq > 0 {
		t.avgQueue, t.hasQueue = q/float64(nq), true
	}
	if nkv > 0 {
		t.avgKV, t.hasKV = kv/float64(nkv), true
	}
	t.down = e.mu.down
	return t
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
	{Name: "kvselect_engine_unavailable_total", Kind: perf.Counter, Help: "Times a worker's engine stopped answering the scrape (transitions to failing; kvselect epp takes it out of selection until it answers)."},
	{Name: "kvselect_engine_unavailable_workers", Kind: perf.Gauge, Help: "Workers whose last engine scrape failed."},
}

func writeEngineScrapeMetrics(w io.Writer, e *engineScrape) {
	st, t := e.sc.Stats(), e.totals()
	perf.WriteCounter(w, `kvselect_engine_scrapes_total{outcome="ok"}`, st.OK)
	perf.WriteCounter(w, `kvselect_engine_scrapes_total{outcome="failed"}`, st.Failed)
	perf.WriteCounter(w, "kvselect_engine_unavailable_total", t.down)
	perf.WriteGauge(w, "kvselect_engine_unavailable_workers", float64(t.failing))
}
