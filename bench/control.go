package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WorkerRequest is the body of POST /workers (the struct of that name in
// Dynamo's lib/kv-router/src/services/selection/types.rs) as the harness
// sends it: one worker of DPSize ranks, its HTTP endpoint (the selector
// only returns it to callers, it never connects to it) and, when it has
// any, the ZMQ endpoints of its ranks' KV events keyed by rank ("0", "1",
// ...). The routing group (empty: the default) and the topology fields are
// set for the disagg mix's pools (workerRequests).
type WorkerRequest struct {
	WorkerID          uint64            `json:"worker_id"`
	RoutingGroup      string            `json:"routing_group,omitempty"`
	Endpoint          string            `json:"endpoint"`
	BlockSize         int               `json:"block_size"`
	DPStartRank       int               `json:"data_parallel_start_rank"`
	DPSize            int               `json:"data_parallel_size"`
	TotalKVBlocks     int               `json:"total_kv_blocks,omitempty"`
	MaxBatchedTokens  int               `json:"max_num_batched_tokens,omitempty"`
	KVEventsEndpoints map[string]string `json:"kv_events_endpoints,omitempty"`
	ReplayEndpoint    string            `json:"replay_endpoint,omitempty"`
	// Taints, TopologyDomains and the KV-transfer fields are the
	// reference's WorkerRequest fields of the same names.
	Taints                []string          `json:"taints,omitempty"`
	TopologyDomains       map[string]string `json:"topology_domains,omitempty"`
	KVTransferDomain      string            `json:"kv_transfer_domain,omitempty"`
	KVTransferEnforcement string            `json:"kv_transfer_enforcement,omitempty"`
}

// StatusError is a control call answered with a status outside 2xx.
type StatusError struct {
	Call   string // "POST /workers"
	Status int
	Body   string // quoted, clipped to 300 bytes
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: status %d: %s", e.Call, e.Status, e.Body)
}

// ErrNotApplied marks a selector that did not apply a simulated engine's KV
// events in time (or has no subscriber on its endpoint).
var ErrNotApplied = errors.New("bench: the selector did not apply the engines' KV events")

// Control is a control-plane client of one selector (or of the no-op
// baseline): registration, readiness, loads and overlap scores, one call at
// a time. Its methods are safe for concurrent use; Close drops its idle
// connections.
type Control struct {
	t       *target
	timeout time.Duration // per call
}

// NewControl returns a Control for base ("http://host:port[/prefix]");
// name labels its errors; timeout bounds each call.
func NewControl(name, base string, timeout time.Duration) (*Control, error) {
	t, err := newTarget(name, base, 4, timeout)
	if err != nil {
		return nil, err
	}
	return &Control{t: t, timeout: timeout}, nil
}

// Close drops the idle connections.
func (c *Control) Close() { c.t.close() }

// Call makes one call and returns a copy of the response body. A status
// outside 2xx is a *StatusError; a transport error names the call.
func (c *Control) Call(method, path string, body []byte) ([]byte, error) {
	return c.callTimeout(method, path, body, c.timeout)
}

func (c *Control) callTimeout(method, path string, body []byte, timeout time.Duration) ([]byte, error) {
	status, resp, err := c.t.ctl(method, path, body, timeout)
	if err != nil {
		return nil, err
	}
	if status/100 != 2 {
		return resp, &StatusError{Call: c.t.name + ": " + method + " " + path, Status: status, Body: clip(resp)}
	}
	return resp, nil
}

// RegisterWorker upserts w with POST /workers.
func (c *Control) RegisterWorker(w *WorkerRequest) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if _, err := c.Call("POST", "/workers", body); err != nil {
		return fmt.Errorf("bench: worker %d: %w", w.WorkerID, err)
	}
	return nil
}

// WaitReady polls GET /ready every 50 ms until it answers 200.
func (c *Control) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.callTimeout("GET", "/ready", nil, time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s not ready after %v: %w", c.t.name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ActiveRequests sums active_requests over GET /loads, which answers one
// object per partition, each with a row per (worker, rank) in "loads".
func (c *Control) ActiveRequests() (int64, error) {
	body, err := c.Call("GET", "/loads", nil)
	if err != nil {
		return 0, err
	}
	var parts []struct {
		Loads []struct {
			ActiveRequests int64 `json:"active_requests"`
		} `json:"loads"`
	}
	if err := json.Unmarshal(body, &parts); err != nil {
		return 0, fmt.Errorf("bench: %s: GET /loads: %w", c.t.name, err)
	}
	var n int64
	for _, p := range parts {
		for _, l := range p.Loads {
			n += l.ActiveRequests
		}
	}
	return n, nil
}

// Counter sums the samples of one metric family (every label set) in the
// selector's GET /metrics; 0 when the family is absent.
func (c *Control) Counter(family string) (float64, error) {
	body, err := c.Call("GET", "/metrics", nil)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		end := strings.IndexAny(line, "{ ")
		if end < 0 || line[:end] != family {
			continue
		}
		// The value follows the name or the label set (whose values may
		// hold spaces).
		rest := line[end:]
		if rest[0] == '{' {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("bench: %s: GET /metrics: %s: %w", c.t.name, family, err)
		}
		sum += v
	}
	return sum, nil
}

// DeviceBlocks returns the device blocks of a prompt (body: a selection
// body, e.g. Prompt.Body) that the selector's index holds on (worker, rank
// 0), from POST /overlap_scores; 0 when the worker has no row.
func (c *Control) DeviceBlocks(body []byte, worker uint64) (int, error) {
	resp, err := c.Call("POST", "/overlap_scores", body)
	if err != nil {
		return 0, err
	}
	var os struct {
		Workers []struct {
			WorkerID     uint64 `json:"worker_id"`
			DPRank       uint32 `json:"dp_rank"`
			DeviceBlocks int    `json:"device_blocks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(resp, &os); err != nil {
		return 0, fmt.Errorf("bench: %s: POST /overlap_scores response: %w", c.t.name, err)
	}
	for _, row := range os.Workers {
		if row.WorkerID == worker && row.DPRank == 0 {
			return row.DeviceBlocks, nil
		}
	}
	return 0, nil
}

// DeviceBlocksByWorker sets dst[worker] to the device blocks of a prompt
// (a selection body) that the selector's index holds on each (worker,
// rank 0), from one POST /overlap_scores; workers without a row are left
// out.
func (c *Control) DeviceBlocksByWorker(body []byte, dst map[uint64]int) error {
	resp, err := c.Call("POST", "/overlap_scores", body)
	if err != nil {
		return err
	}
	var os struct {
		Workers []struct {
			WorkerID     uint64 `json:"worker_id"`
			DPRank       uint32 `json:"dp_rank"`
			DeviceBlocks int    `json:"device_blocks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(resp, &os); err != nil {
		return fmt.Errorf("bench: %s: POST /overlap_scores response: %w", c.t.name, err)
	}
	clear(dst)
	for _, row := range os.Workers {
		if row.DPRank == 0 {
			dst[row.WorkerID] = row.DeviceBlocks
		}
	}
	return nil
}

// AwaitDeviceBlocks polls DeviceBlocks until it reaches want, for at most
// timeout, pausing 100 µs doubling to 2 ms between polls, and returns the
// last count. It returns ok false when the count stayed below want; err is
// a failed call or ctx's error.
//
// With an Engine that publishes one batch per served prompt, evictions
// before stores, and a selector that applies a worker's events in order,
// seeing the served prompt's blocks on the worker means the whole batch,
// evictions included, is applied.
func (c *Control) AwaitDeviceBlocks(ctx context.Context, body []byte, worker uint64, want int, timeout time.Duration) (got int, ok bool, err error) {
	deadline := time.Now().Add(timeout)
	pause := 100 * time.Microsecond
	for {
		if got, err = c.DeviceBlocks(body, worker); err != nil || got >= want {
			return got, err == nil, err
		}
		if err := ctx.Err(); err != nil {
			return got, false, err
		}
		if time.Now().After(deadline) {
			return got, false, nil
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}

// ErrorClass is the key under which a failed control call is counted: the
// status of a *StatusError, else a short name of the transport error (as
// the load report counts failed calls).
func ErrorClass(err error) string {
	var se *StatusError
	if errors.As(err, &se) {
		return errorClass(se.Status, nil)
	}
	return errorClass(0, err)
}

// AwaitSubscribers waits until rank 0 of every engine has a subscriber (a
// PUB drops what it publishes before a subscription), for at most timeout.
func AwaitSubscribers(ctx context.Context, engines []*Engine, timeout time.Duration) error {
	return awaitSubscribers(ctx, engines, 1, timeout)
}

// awaitSubscribers waits until rank 0 of every engine has n subscribers
// (one per selector replica), for at most timeout.
func awaitSubscribers(ctx context.Context, engines []*Engine, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i, e := range engines {
		for e.Subscribers(0) < n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: %d of %d subscribers on worker %d's KV event endpoint %s after %v: does the selector listen to kv_events_endpoints?",
					ErrNotApplied, e.Subscribers(0), n, i+1, e.Endpoints()[0], timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// register upserts the run's workers (workerRequests) and waits until GET
// /ready answers 200.
func register(c *Control, cfg *Config) error {
	ws := workerRequests(cfg)
	for i := range ws {
		if err := c.RegisterWorker(&ws[i]); err != nil {
			return err
		}
	}
	return c.WaitReady(cfg.ReadyTimeout)
}

// clip shortens a response body for an error message.
func clip(b []byte) string {
	const n = 300
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}
