package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvselect/kvselect/perf/promcheck"
)

// sglangMetrics is an SGLang server's exposition (its names:
// sglang/python/sglang/srt/metrics/collector.py, the families GIE's
// model-server protocol maps: num_running_reqs, num_queue_reqs,
// token_usage).
const sglangMetrics = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 1.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 3.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.1
`

// TestEppEngineMetrics runs `kvselect epp --engine-metrics-interval`
// against two engines on loopback that answer /metrics as vLLM (its
// exposition as captured, data-parallel with two engine cores) and SGLang
// do: each worker's scraped load shows in /loads beside its booked load,
// GIE's pool gauges average them; the SGLang worker's engine stops
// answering and it is out of selection (every pick goes to the other,
// /loads says so, counted, logged once) until it answers again.
func TestEppEngineMetrics(t *testing.T) {
	vllm, err := os.ReadFile("../../httpapi/engines/testdata/vllm_metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	serve := func(body func() (string, bool)) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, ok := body()
			if r.URL.Path != "/metrics" || !ok {
				http.Error(w, "engine down", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			fmt.Fprint(w, b)
		}))
		t.Cleanup(s.Close)
		return s
	}
	e1 := serve(func() (string, bool) { return string(vllm), true })
	e2 := serve(func() (string, bool) { return sglangMetrics, !down.Load() })
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":%q,"block_size":4},{"worker_id":2,"model_name":"m","endpoint":%q,"block_size":4}]}`, e1.URL, e2.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEppProc(t, "--workers-file", file, "--model-name", "m", "--kv-events=false", "--engine-metrics-interval", "20ms")
	p.eventually("both engines' loads in /loads", func() bool {
		l, _ := p.get("/loads")
		return strings.Contains(l, `"worker_id":1,"dp_rank":0,"potential_prefill_tokens":0,"potential_decode_blocks":0,"active_requests":0,"engine":{"answering":true,"num_requests_waiting":1,"num_requests_running":5,"kv_cache_usage_perc":0.5}}`) &&
			strings.Contains(l, `"engine":{"answering":true,"num_requests_waiting":3,"num_requests_running":1,"kv_cache_usage_perc":0.1}`)
	})
	m, _ := p.get("/metrics")
	fams, problems := promcheck.Check([]byte(m))
	for _, pr := range problems {
		t.Error(pr)
	}
	for name, want := range map[string]float64{"inference_pool_average_queue_size": 2, "inference_pool_average_kv_cache_utilization": 0.3} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetLabel()[0].GetName() != "name" {
			t.Fatalf("%s: %v", name, f)
		}
		if got := f.GetMetric()[0].GetGauge().GetValue(); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	c := p.client()
	// The booked load beside the scraped one: a pick held open.
	d, _, cancel := eppPick(t, c, `{"model":"m","prompt":[1,2,3,4,5]}`)
	cancel()
	if d != host(e1) && d != host(e2) {
		t.Fatalf("picked %q", d)
	}

	down.Store(true)
	p.eventually("the SGLang worker out of selection", func() bool {
		l, _ := p.get("/loads")
		m, _ := p.get("/metrics")
		return strings.Contains(l, `"worker_id":2,"dp_rank":0`) && strings.Contains(l, `"engine":{"answering":false}`) &&
			strings.Contains(m, "kvselect_engine_unavailable_total 1") && strings.Contains(m, "kvselect_engine_unavailable_workers 1")
	})
	for i := range 6 { // held open: worker 1's booked load grows, yet 2 is never picked
		if d, _, _ := eppPick(t, c, fmt.Sprintf(`{"model":"m","prompt":[%d,2,3,4,5,6,7,8]}`, 10+i)); d != host(e1) {
			t.Fatalf("pick %d went to %s with its engine down", i, d)
		}
	}
	if r, _ := p.get("/ready"); !strings.Contains(r, `"schedulable_workers":1`) {
		t.Fatalf("/ready: %s", r)
	}
	down.Store(false)
	p.eventually("the SGLang worker back in selection", func() bool {
		d, _, _ := eppPick(t, c, `{"model":"m","prompt":[99,98,97,96,95]}`) // held: the load tilts to 2
		return d == host(e2)
	})
	// The child's stderr reaches p.logs through a copying goroutine, so
	// the line written before the pick may arrive a moment after it.
	p.eventually("the recovery logged", func() bool {
		return strings.Contains(p.logs.String(), "engine metrics: scrape answers again")
	})
	logs := p.logs.String()
	if n := strings.Count(logs, "engine metrics: scrape failed"); n != 1 {
		t.Errorf("the failing scrape logged %d times, want once:\n%s", n, logs)
	}
}
