package bench

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// workerRequest is the body of POST /workers (service-api.md 1.3) for a
// benchmark worker: one DP rank, a placeholder endpoint (the selector never
// connects to it), and KV-event endpoints only when the caller gave some.
type workerRequest struct {
	WorkerID          uint64            `json:"worker_id"`
	Endpoint          string            `json:"endpoint"`
	BlockSize         int               `json:"block_size"`
	DPStartRank       int               `json:"data_parallel_start_rank"`
	DPSize            int               `json:"data_parallel_size"`
	TotalKVBlocks     int               `json:"total_kv_blocks,omitempty"`
	KVEventsEndpoints map[string]string `json:"kv_events_endpoints,omitempty"`
	ReplayEndpoint    string            `json:"replay_endpoint,omitempty"`
}

// register upserts cfg.Workers workers (ids 1..Workers) and waits until GET
// /ready answers 200.
func register(t *target, cfg *Config) error {
	for i := range cfg.Workers {
		w := workerRequest{
			WorkerID:      uint64(i + 1),
			Endpoint:      fmt.Sprintf("http://bench-worker-%d:8000", i+1),
			BlockSize:     cfg.BlockSize,
			DPSize:        1,
			TotalKVBlocks: cfg.TotalKVBlocks,
		}
		if n := len(cfg.KVEventsEndpoints); n > 0 {
			w.KVEventsEndpoints = map[string]string{"0": cfg.KVEventsEndpoints[i%n]}
		}
		body, err := json.Marshal(&w)
		if err != nil {
			return err
		}
		status, resp, err := t.ctl("POST", "/workers", body, cfg.Timeout)
		if err != nil {
			return err
		}
		if status/100 != 2 {
			return fmt.Errorf("bench: %s: POST /workers %d: status %d: %s", t.name, i+1, status, clip(resp))
		}
	}
	return waitReady(t, cfg.ReadyTimeout)
}

// waitReady polls GET /ready every 50 ms until it answers 200.
func waitReady(t *target, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		status, body, err := t.ctl("GET", "/ready", nil, time.Second)
		if err == nil && status == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("bench: %s not ready after %v: %w", t.name, timeout, err)
			}
			return fmt.Errorf("bench: %s not ready after %v: GET /ready %d: %s", t.name, timeout, status, clip(body))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// activeRequests sums active_requests over every partition and worker rank in
// GET /loads (service-api.md 1.7).
func activeRequests(t *target, timeout time.Duration) (int64, error) {
	status, body, err := t.ctl("GET", "/loads", nil, timeout)
	if err != nil {
		return 0, err
	}
	if status != 200 {
		return 0, fmt.Errorf("bench: %s: GET /loads: status %d: %s", t.name, status, clip(body))
	}
	var parts []struct {
		Loads []struct {
			ActiveRequests int64 `json:"active_requests"`
		} `json:"loads"`
	}
	if err := json.Unmarshal(body, &parts); err != nil {
		return 0, fmt.Errorf("bench: %s: GET /loads: %w", t.name, err)
	}
	var n int64
	for _, p := range parts {
		for _, l := range p.Loads {
			n += l.ActiveRequests
		}
	}
	return n, nil
}

// clip shortens a response body for an error message.
func clip(b []byte) string {
	const n = 300
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}
