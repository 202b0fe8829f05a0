package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEngineMetricsNarrowLora: with --engine-metrics-interval, serve
// scrapes each worker's engine (here a real HTTP server answering /metrics
// as vLLM does) and a request naming a LoRA adapter the engine runs goes
// to that worker; once the engine stops answering, its adapters are
// cleared and the request is scheduled as without.
func TestEngineMetricsNarrowLora(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `# TYPE vllm:lora_requests_info gauge`)
		fmt.Fprintln(w, `vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7e9`)
	}))
	defer engine.Close()
	r := startServe(t, []string{"--engine-metrics-interval", "20ms"}, map[string]string{"DYN_USE_KV_EVENTS": "false"})
	for id, ep := range map[int]string{1: "http://127.0.0.1:1", 2: engine.URL, 3: "mock://engine-3"} {
		if code, body := r.do("POST", "/workers", fmt.Sprintf(`{"worker_id":%d,"endpoint":%q,"block_size":4}`, id, ep)); code != 201 {
			t.Fatalf("register %d: %d %s", id, code, body)
		}
	}
	picks := func() map[string]bool {
		seen := map[string]bool{}
		for range 30 {
			_, body := r.do("POST", "/select", `{"block_hashes":[1],"sequence_hashes":[1],"isl_tokens":4,"lora_name":"sql-lora"}`)
			i := strings.Index(body, `"worker_id":`)
			seen[body[i+12:i+13]] = true
		}
		return seen
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := picks(); len(got) != 1 || !got["2"]; got = picks() {
		if time.Now().After(deadline) {
			t.Fatalf("LoRA requests went to %v, want only worker 2\nlogs:\n%s", got, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	up.Store(false)
	for got := picks(); len(got) < 2; got = picks() {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("after the engine went down LoRA requests still go to %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, m := r.do("GET", "/metrics", ""); !strings.Contains(m, `kvselect_engine_scrapes_total{outcome="failed"}`) {
		t.Fatal("no scrape counter")
	}
	if !strings.Contains(r.logs.String(), "engine metrics: scrape failed") {
		t.Fatalf("the failing scrape was not logged:\n%s", r.logs.String())
	}
}
