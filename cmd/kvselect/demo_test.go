package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeDemo runs `kvselect serve --demo 3` the way `make run` does: real
// simulated engines publish ZMQ KV events, the service ingests them, /ready
// turns 200, and a selection for the demo conversation shows its overlap on
// worker 1 (the README's curl example). /metrics exports the listeners, the
// connected ranks and the ingress's byte bounds, each series once.
func TestServeDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--demo", "3"}, envOf(nil), &logs, ready)
	}()
	var addr string
	select {
	case b := <-ready:
		addr = b.http
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, logs.String())
		}
	}()
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/ready"); code != 200 || !strings.Contains(body, `"schedulable_workers":3`) {
		t.Fatalf("/ready %d %s", code, body)
	}
	toks := make([]string, demoConversationBlocks*16)
	for i := range toks {
		toks[i] = fmt.Sprint(i + 1)
	}
	body := `{"token_ids":[` + strings.Join(toks, ",") + `]}`
	res, err := http.Post("http://"+addr+"/select", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var sel struct {
		WorkerID uint64 `json:"worker_id"`
		Overlap  struct {
			GPU int `json:"gpu"`
		} `json:"overlap"`
		EffectivePrefill int `json:"effective_prefill_tokens"`
	}
	err = json.NewDecoder(res.Body).Decode(&sel)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("/select %d %v", res.StatusCode, err)
	}
	if sel.WorkerID != 1 || sel.Overlap.GPU != 128 || sel.EffectivePrefill != 0 {
		t.Fatalf("want worker 1 with 128 cached tokens, got %+v", sel)
	}
	// A prompt sharing only the system prompt overlaps 64 tokens everywhere.
	res, err = http.Post("http://"+addr+"/overlap_scores", "application/json",
		strings.NewReader(`{"token_ids":[`+strings.Join(toks[:64], ",")+`,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Count(string(b), `"device_blocks":4`) != 3 {
		t.Fatalf("/overlap_scores: want 4 device blocks on all 3 workers: %s", b)
	}
	code, metrics := get("/metrics")
	// A scrape with a series twice is rejected by Prometheus.
	seen := map[string]bool{}
	for _, line := range strings.Split(metrics, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:max(strings.LastIndexByte(line, ' '), 0)] // labels may hold spaces; the value may not
		if seen[name] {
			t.Errorf("/metrics has %s twice", name)
		}
		seen[name] = true
	}
	for _, want := range []string{"kvselect_kv_listeners 3\n", "kvselect_kv_listeners_running 3\n", "kvselect_kv_listeners_connected 3\n",
		"kvselect_kv_batches_delivered_total 3\n", `kvselect_kv_connections_dropped_total{reason="frame_too_large"} 0` + "\n",
		"kvselect_kv_queue_bytes 0\n", "kvselect_kv_queue_bytes_limit_per_listener ", "kvselect_kv_queue_bytes_limit ",
		"kvselect_kv_writer_queue_bytes_limit_per_writer 67108864\n", "kvselect_index_max_blocks_per_rank 8388608\n"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("/metrics %d lacks %q:\n%s", code, want, metrics)
		}
	}
}
