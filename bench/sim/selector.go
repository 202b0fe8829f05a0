package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/kvselect/kvselect/bench"
)

// selectorRouter is a selector's policy: the selector chooses through
// POST /select_and_reserve (with router_config_override.routing_policy
// when override is set), and the simulation reports each request's
// lifecycle (prefill_complete at its first token, DELETE at its end) in
// virtual-time order. The engines' KV events reach the selector over real
// ZMQ; before each selection, sync publishes what every engine changed
// since the last one and waits until the selector has applied it.
type selectorRouter struct {
	ctx      context.Context
	c        *bench.Control
	bs       int
	cfg      *Config
	engines  []*simEngine
	nonce    string
	override string
	// ids[i] is request i's selection id once reserved.
	ids    []string
	errors map[string]int64
	// round is the sync round; tok, local and want are its scratch.
	round   uint64
	tok     []uint32
	want    []uint64
	seen    map[uint64]int
	body    []byte
	timeout int64
	synced  int64
	mismat  int64
	wait    time.Duration
	// approx: the selector has no KV events (approximate mode). Its
	// workers have no kv_events endpoint, nothing is published or
	// synchronised, and the overlap it reports is a prediction:
	// mismatches count how often it differs from the engine's cache.
	approx bool
}

// newSelectorRouter registers one worker per engine (ids 1..n, rank 0 on
// the engine's PUB and replay sockets, total_kv_blocks and
// max_num_batched_tokens the engine's), waits for GET /ready and until
// every engine has a subscriber: a PUB drops what it publishes before a
// subscription.
func newSelectorRouter(ctx context.Context, base string, load *bench.Config, cfg *Config, engines []*simEngine, override string, approx bool) (*selectorRouter, error) {
	c, err := bench.NewControl("selector", base, load.Timeout)
	if err != nil {
		return nil, err
	}
	k := &selectorRouter{
		ctx: ctx, c: c, bs: load.BlockSize, cfg: cfg, engines: engines, override: override,
		nonce: strconv.FormatInt(time.Now().UnixNano(), 36), errors: map[string]int64{},
		ids: make([]string, len(engines[0].w.reqs)), seen: map[uint64]int{}, approx: approx,
	}
	for i, e := range engines {
		w := bench.WorkerRequest{
			WorkerID:         uint64(i + 1),
			Endpoint:         fmt.Sprintf("http://sim-worker-%d:8000", i+1),
			BlockSize:        load.BlockSize,
			DPSize:           1,
			TotalKVBlocks:    cfg.CapacityBlocks,
			MaxBatchedTokens: cfg.MaxBatchedTokens,
		}
		if !approx {
			w.KVEventsEndpoints = map[string]string{"0": e.pub.Endpoint()}
			w.ReplayEndpoint = e.pub.ReplayEndpoint()
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
	deadline := time.Now().Add(load.ReadyTimeout)
	for i, e := range engines {
		for e.pub.Subscribers() == 0 {
			if err := ctx.Err(); err != nil {
				c.Close()
				return nil, err
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, fmt.Errorf("%w: no subscriber on worker %d's KV event endpoint %s after %v: does the selector listen to kv_events_endpoints?",
					bench.ErrNotApplied, i+1, e.pub.Endpoint(), load.ReadyTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return k, nil
}

func (k *selectorRouter) fail(route string, err error) {
	k.errors[route+":"+bench.ErrorClass(err)]++
}

// sync publishes every engine's queued changes, each batch closed by this
// round's sync block (syncBlock), and polls POST /overlap_scores with the
// sync block until every worker that published shows it, for at most
// cfg.SyncTimeout (a timeout is counted; the first one aborts, as a
// selector that ingests no KV events).
func (k *selectorRouter) sync() error {
	if k.approx {
		return nil
	}
	k.round++
	var local, engineHash uint64
	k.tok, local, engineHash = syncBlock(k.round, k.bs, k.tok[:0])
	k.want = k.want[:0]
	for i, e := range k.engines {
		if e.flush(k.round, k.tok, engineHash) {
			k.want = append(k.want, uint64(i+1))
		}
	}
	if len(k.want) == 0 {
		return nil
	}
	k.body = fmt.Appendf(k.body[:0], `{"block_hashes":[%d],"sequence_hashes":[%d],"isl_tokens":%d}`, int64(local), int64(local), k.bs)
	start := time.Now()
	defer func() { k.wait += time.Since(start) }()
	deadline := start.Add(k.cfg.SyncTimeout)
	pause := 50 * time.Microsecond
	for {
		if err := k.c.DeviceBlocksByWorker(k.body, k.seen); err != nil {
			if k.ctx.Err() == nil {
				k.fail("overlap_scores", err)
			}
			return err
		}
		all := true
		for _, w := range k.want {
			all = all && k.seen[w] >= 1
		}
		if all {
			k.synced++
			return nil
		}
		if err := k.ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			k.timeout++
			if k.synced == 0 {
				return fmt.Errorf("%w: workers %v do not show sync round %d after %v", bench.ErrNotApplied, k.want, k.round, k.cfg.SyncTimeout)
			}
			return nil
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}

func (k *selectorRouter) pick(_ float64, i int, r *simRequest) (int, error) {
	if err := k.sync(); err != nil {
		return 0, err
	}
	id := "sim-" + k.nonce + "-" + strconv.Itoa(i)
	body := append(append([]byte(`{"selection_id":"`), id...), `",`...)
	if k.override != "" {
		body = append(append(append(body, `"router_config_override":{"routing_policy":"`...), k.override...), `"},`...)
	}
	body = append(body, r.p.Body[1:]...)
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
	if sel.WorkerID < 1 || sel.WorkerID > uint64(len(k.engines)) || sel.DPRank != 0 {
		return 0, fmt.Errorf("sim: request %d: the selector chose worker %d rank %d, not one of the simulation's", i, sel.WorkerID, sel.DPRank)
	}
	w := int(sel.WorkerID - 1)
	k.ids[i] = id
	if sel.Overlap.GPU != k.engines[w].eng.CachedPrefix(r.p.Seq)*k.bs {
		k.mismat++
	}
	return w, nil
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
	if !k.approx {
		credited, err := k.c.Counter("kvselect_prefill_credited_tokens_total")
		if err != nil {
			return err
		}
		res.CreditedPrefillTokens = int64(credited)
	}
	res.SyncTimeouts = k.timeout
	res.OverlapMismatches = k.mismat
	res.SyncWaitMs = float64(k.wait) / float64(time.Millisecond)
	if len(k.errors) > 0 {
		res.Errors = k.errors
	}
	return nil
}
