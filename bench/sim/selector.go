package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/kvselect/kvselect/bench"
)

// selectorRouter is the kvselect policy: the selector chooses through POST
// /select_and_reserve, and the simulation reports each request's lifecycle
// (prefill_complete, DELETE) in virtual-time order. Its engines' KV events
// reach the selector over real ZMQ; served waits until the selector has
// applied each published batch before the next request is routed.
type selectorRouter struct {
	ctx     context.Context
	c       *bench.Control
	bs      int
	cfg     *Config
	engines []*bench.Engine
	nonce   string
	// gpu[i] is the selector's overlap.gpu (matched tokens) for request i.
	gpu     []int
	ids     []string // selection id of request i, once reserved
	errors  map[string]int64
	timeout int64
	synced  int64 // batches seen applied
	mismat  int64
	wait    time.Duration
	// approx: the selector has no KV events (approximate mode). Its
	// workers have no kv_events endpoint, nothing is synchronised, and
	// the overlap it reports is a prediction: mismatches count how often
	// the prediction differs from the engine's hit.
	approx bool
}

// newSelectorRouter registers one worker per engine (ids 1..n, rank 0 on
// the engine's PUB and replay sockets, total_kv_blocks the capacity), waits
// for GET /ready and until every engine has a subscriber: a PUB drops what
// it publishes before a subscription.
func newSelectorRouter(ctx context.Context, base string, load *bench.Config, cfg *Config, engines []*bench.Engine, approx bool) (*selectorRouter, error) {
	c, err := bench.NewControl("selector", base, load.Timeout)
	if err != nil {
		return nil, err
	}
	k := &selectorRouter{
		ctx: ctx, c: c, bs: load.BlockSize, cfg: cfg, engines: engines,
		nonce: strconv.FormatInt(time.Now().UnixNano(), 36), errors: map[string]int64{}, approx: approx,
	}
	for i, e := range engines {
		w := bench.WorkerRequest{
			WorkerID:      uint64(i + 1),
			Endpoint:      fmt.Sprintf("http://sim-worker-%d:8000", i+1),
			BlockSize:     load.BlockSize,
			DPSize:        1,
			TotalKVBlocks: cfg.CapacityBlocks,
		}
		if !approx {
			w.KVEventsEndpoints = map[string]string{"0": e.Endpoints()[0]}
			w.ReplayEndpoint = e.ReplayEndpoints()[0]
		}
		if err := c.RegisterWorker(&w); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(load.ReadyTimeout); err != nil {
		c.Close()
		return nil, err
	}
	if approx {
		return k, nil // nothing subscribes
	}
	if err := bench.AwaitSubscribers(ctx, engines, load.ReadyTimeout); err != nil {
		c.Close()
		return nil, err
	}
	return k, nil
}

func (k *selectorRouter) fail(route string, err error) {
	k.errors[route+":"+bench.ErrorClass(err)]++
}

func (k *selectorRouter) pick(i int, r *simRequest) (int, error) {
	id := "sim-" + k.nonce + "-" + strconv.Itoa(i)
	body := append(append(append([]byte(`{"selection_id":"`), id...), `",`...), r.p.Body[1:]...)
	resp, err := k.c.Call("POST", "/select_and_reserve", body)
	if err != nil {
		k.fail("select_and_reserve", err)
		return 0, fmt.Errorf("sim: request %d: %w", i, err)
	}
	var sel struct {
		WorkerID uint64 `json:"worker_id"`
		DPRank   uint32 `json:"dp_rank"`
		Overlap  struct {
			GPU int `json:"gpu"`
		} `json:"overlap"`
	}
	if err := json.Unmarshal(resp, &sel); err != nil {
		return 0, fmt.Errorf("sim: request %d: select_and_reserve response: %w", i, err)
	}
	for len(k.ids) <= i {
		k.ids = append(k.ids, "")
		k.gpu = append(k.gpu, 0)
	}
	k.ids[i], k.gpu[i] = id, sel.Overlap.GPU
	if sel.WorkerID < 1 || sel.WorkerID > uint64(len(k.engines)) || sel.DPRank != 0 {
		return 0, fmt.Errorf("sim: request %d: the selector chose worker %d rank %d, not one of the simulation's", i, sel.WorkerID, sel.DPRank)
	}
	return int(sel.WorkerID - 1), nil
}

// served compares the selector's overlap with the engine's hit and, when
// the engine published a batch, waits until the selector's index shows the
// whole stored prompt on worker w (device_blocks of (w, 0) at least
// hit+stored; see bench.Control.AwaitDeviceBlocks): before the batch is
// applied, device_blocks is hit, below the target. So after each wait the
// selector's index of worker w equals the engine's pool, and the next
// selection is scored on exact state.
func (k *selectorRouter) served(i int, r *simRequest, w, hit, stored int) error {
	if k.gpu[i] != hit*k.bs {
		k.mismat++
	}
	if stored == 0 || k.approx {
		return nil
	}
	want := hit + stored
	start := time.Now()
	got, ok, err := k.c.AwaitDeviceBlocks(k.ctx, r.p.Body, uint64(w+1), want, k.cfg.SyncTimeout)
	k.wait += time.Since(start)
	switch {
	case err != nil:
		if k.ctx.Err() == nil {
			k.fail("overlap_scores", err)
		}
		return err
	case ok:
		k.synced++
	default:
		k.timeout++
		if k.synced == 0 {
			return fmt.Errorf("%w: worker %d shows %d of the %d blocks its engine published for request %d after %v",
				bench.ErrNotApplied, w+1, got, want, i, k.cfg.SyncTimeout)
		}
	}
	return nil
}

func (k *selectorRouter) lifecycle(route, method, path string) {
	if _, err := k.c.Call(method, path, nil); err != nil {
		k.fail(route, err)
	}
}

func (k *selectorRouter) prefillDone(i int) error {
	k.lifecycle("prefill_complete", "POST", "/reservations/"+k.ids[i]+"/prefill_complete")
	return nil
}

func (k *selectorRouter) finished(i int) error {
	k.lifecycle("delete", "DELETE", "/reservations/"+k.ids[i])
	return nil
}

// close reads the leak check, deregisters the workers (their listeners
// would otherwise keep dialling closed engines) and fills res.
func (k *selectorRouter) close(res *PolicyResult) error {
	defer k.c.Close()
	leaked, err := k.c.ActiveRequests()
	if err != nil {
		return err
	}
	for i := range k.engines {
		k.lifecycle("delete_worker", "DELETE", "/workers/"+strconv.Itoa(i+1))
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
