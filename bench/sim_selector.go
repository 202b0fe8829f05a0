package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// selectorRouter is the kvselect policy: the selector chooses through POST
// /select_and_reserve, and the simulation reports each request's lifecycle
// (prefill_complete, DELETE) in virtual-time order. Its engines' KV events
// reach the selector over real ZMQ; served waits until the selector has
// applied each published batch before the next request is routed.
type selectorRouter struct {
	t       *target
	cfg     *Config
	engines []*Engine
	nonce   string
	// gpu[i] is the selector's overlap.gpu (matched tokens) for request i.
	gpu     []int
	ids     [][]byte // selection id of request i, once reserved
	errors  map[string]int64
	timeout int64
	synced  int64 // batches seen applied
	mismat  int64
	wait    time.Duration
}

// newSelectorRouter registers one worker per engine (ids 1..n, rank 0 on
// the engine's PUB and replay sockets, total_kv_blocks the capacity), waits
// for GET /ready and until every engine has a subscriber: a PUB drops what
// it publishes before a subscription.
func newSelectorRouter(ctx context.Context, base string, cfg *Config, engines []*Engine) (*selectorRouter, error) {
	t, err := newTarget("selector", base, 4, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	k := &selectorRouter{
		t: t, cfg: cfg, engines: engines, nonce: strconv.FormatInt(time.Now().UnixNano(), 36),
		errors: map[string]int64{},
	}
	for i, e := range engines {
		w := workerRequest{
			WorkerID:          uint64(i + 1),
			Endpoint:          fmt.Sprintf("http://sim-worker-%d:8000", i+1),
			BlockSize:         cfg.BlockSize,
			DPSize:            1,
			TotalKVBlocks:     cfg.Sim.CapacityBlocks,
			KVEventsEndpoints: map[string]string{"0": e.Endpoints()[0]},
			ReplayEndpoint:    e.ReplayEndpoints()[0],
		}
		body, err := json.Marshal(&w)
		if err != nil {
			return nil, err
		}
		status, resp, err := t.ctl("POST", "/workers", body, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		if status/100 != 2 {
			return nil, fmt.Errorf("bench: POST /workers %d: status %d: %s", i+1, status, clip(resp))
		}
	}
	if err := waitReady(t, cfg.ReadyTimeout); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for i, e := range engines {
		for e.Subscribers(0) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%w: no subscriber on worker %d's KV event endpoint %s after %v: does the selector listen to kv_events_endpoints?",
					errSync, i+1, e.Endpoints()[0], cfg.ReadyTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return k, nil
}

func (k *selectorRouter) id(i int) []byte {
	return fmt.Appendf(nil, "sim-%s-%d", k.nonce, i)
}

func (k *selectorRouter) fail(route string, status int, err error) {
	k.errors[route+":"+errorClass(status, err)]++
}

func (k *selectorRouter) pick(i int, r *simRequest) (int, error) {
	id := k.id(i)
	body := append(append(append([]byte(`{"selection_id":"`), id...), `",`...), r.p.Body[1:]...)
	status, resp, err := k.t.ctl("POST", "/select_and_reserve", body, k.cfg.Timeout)
	if err != nil || status != 200 {
		k.fail("select_and_reserve", status, err)
		if err == nil {
			err = fmt.Errorf("status %d: %s", status, clip(resp))
		}
		return 0, fmt.Errorf("bench: request %d: POST /select_and_reserve: %w", i, err)
	}
	var sel struct {
		WorkerID uint64 `json:"worker_id"`
		DPRank   uint32 `json:"dp_rank"`
		Overlap  struct {
			GPU int `json:"gpu"`
		} `json:"overlap"`
	}
	if err := json.Unmarshal(resp, &sel); err != nil {
		return 0, fmt.Errorf("bench: request %d: select_and_reserve response: %w", i, err)
	}
	for len(k.ids) <= i {
		k.ids = append(k.ids, nil)
		k.gpu = append(k.gpu, 0)
	}
	k.ids[i], k.gpu[i] = id, sel.Overlap.GPU
	if sel.WorkerID < 1 || sel.WorkerID > uint64(len(k.engines)) || sel.DPRank != 0 {
		return 0, fmt.Errorf("bench: request %d: the selector chose worker %d rank %d, not one of the simulation's", i, sel.WorkerID, sel.DPRank)
	}
	return int(sel.WorkerID - 1), nil
}

// served compares the selector's overlap with the engine's hit and, when
// the engine published a batch, waits until the selector's index shows the
// whole stored prompt on worker w (POST /overlap_scores, device_blocks of
// (w, 0) at least hit+stored). The engine publishes one batch per prompt,
// its evictions before its stores, and the selector applies a worker's
// events in order, so seeing the stores means the whole batch, evictions
// included, is applied; before it is, device_blocks is hit, below the
// target. So after each wait the selector's index of worker w equals the
// engine's pool, and the next selection is scored on exact state.
func (k *selectorRouter) served(i int, r *simRequest, w, hit, stored int) error {
	if k.gpu[i] != hit*k.cfg.BlockSize {
		k.mismat++
	}
	if stored == 0 {
		return nil
	}
	want := hit + stored
	start := time.Now()
	deadline := start.Add(k.cfg.Sim.SyncTimeout)
	pause := 100 * time.Microsecond
	for {
		got, err := k.deviceBlocks(r.p.Body, uint64(w+1))
		if err != nil {
			return err
		}
		if got >= want {
			k.synced++
			break
		}
		if time.Now().After(deadline) {
			k.timeout++
			if k.synced == 0 {
				return fmt.Errorf("%w: worker %d shows %d of the %d blocks its engine published for request %d after %v",
					errSync, w+1, got, want, i, k.cfg.Sim.SyncTimeout)
			}
			break
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
	k.wait += time.Since(start)
	return nil
}

// deviceBlocks returns the device blocks of prompt body matched on (worker, 0).
func (k *selectorRouter) deviceBlocks(body []byte, worker uint64) (int, error) {
	status, resp, err := k.t.ctl("POST", "/overlap_scores", body, k.cfg.Timeout)
	if err != nil || status != 200 {
		k.fail("overlap_scores", status, err)
		if err == nil {
			err = fmt.Errorf("status %d: %s", status, clip(resp))
		}
		return 0, fmt.Errorf("bench: POST /overlap_scores: %w", err)
	}
	var os struct {
		Workers []struct {
			WorkerID     uint64 `json:"worker_id"`
			DPRank       uint32 `json:"dp_rank"`
			DeviceBlocks int    `json:"device_blocks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(resp, &os); err != nil {
		return 0, fmt.Errorf("bench: POST /overlap_scores response: %w", err)
	}
	for _, row := range os.Workers {
		if row.WorkerID == worker && row.DPRank == 0 {
			return row.DeviceBlocks, nil
		}
	}
	return 0, nil
}

func (k *selectorRouter) lifecycle(route, method, path string, body []byte) {
	status, _, err := k.t.ctl(method, path, body, k.cfg.Timeout)
	if err != nil || status != 200 {
		k.fail(route, status, err)
	}
}

func (k *selectorRouter) prefillDone(i int) error {
	k.lifecycle("prefill_complete", "POST", "/reservations/"+string(k.ids[i])+"/prefill_complete", nil)
	return nil
}

func (k *selectorRouter) finished(i int) error {
	k.lifecycle("delete", "DELETE", "/reservations/"+string(k.ids[i]), nil)
	return nil
}

// close reads the leak check, deregisters the workers (their listeners
// would otherwise keep dialling closed engines) and fills res.
func (k *selectorRouter) close(res *PolicyResult) error {
	defer k.t.close()
	leaked, err := activeRequests(k.t, k.cfg.Timeout)
	if err != nil {
		return err
	}
	for i := range k.engines {
		k.lifecycle("delete_worker", "DELETE", "/workers/"+strconv.Itoa(i+1), nil)
	}
	res.LeakedReservations = leaked
	res.SyncTimeouts = k.timeout
	res.OverlapMismatches = k.mismat
	res.SyncWaitMs = float64(k.wait) / float64(time.Millisecond)
	if len(k.errors) > 0 {
		res.Errors = k.errors
	}
	return nil
}
