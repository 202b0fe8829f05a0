package kube

import (
	"bytes"
	"context"
	"fmt"
	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
)

const testNS = "llm"

// waitTimeout bounds every wait for the membership to converge: the
// informers' work is real HTTP on loopback.
const waitTimeout = 30 * time.Second

// env is a Source running against a fake API server, feeding a reconciler
// of a real core.Service.
type env struct {
	api     *kubetest.API
	svc     *core.Service
	rec     *core.CatalogReconciler
	src     *Source
	changed chan struct{} // a token after every catalog change
}

// notify is the reconciler's observer: a token per change.
type notify chan struct{}

func (n notify) Upserted(core.WorkerRecord) { n.poke() }
func (n notify) Removed(core.WorkerRecord)  { n.poke() }
func (n notify) poke() {
	select {
	case n <- struct{}{}:
	default:
	}
}

func testConfig() Config {
	c := DefaultConfig()
	c.ModelName, c.BlockSize = "llama", 16
	c.Debounce = 20 * time.Millisecond
	return c
}

// start runs a source with cfg against api, through a kubeconfig file
// (whose context names testNS: cfg.Namespace stays empty).
func start(t *testing.T, api *kubetest.API, cfg Config) *env {
	t.Helper()
	sc := core.DefaultConfig()
	sc.UseKVEvents = false
	svc, err := core.New(sc, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{api: api, svc: svc, changed: make(chan struct{}, 1)}
	e.rec, err = core.NewCatalogReconciler(svc, core.ReconcilerConfig{Name: "kubernetes", Exclusive: true, Observer: notify(e.changed), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kubeconfig = api.Kubeconfig(t, testNS)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.src, err = New(cfg, e.rec, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		e.rec.Close()
	})
	return e
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// workers returns the catalog as worker id → endpoint.
func (e *env) workers() map[uint64]string {
	out := map[uint64]string{}
	for _, r := range e.svc.ListWorkers("", "") {
		out[r.WorkerID] = *r.Endpoint
	}
	return out
}

// waitFor waits until the catalog is want (worker id → endpoint),
// re-checking after every catalog change.
func (e *env) waitFor(t *testing.T, what string, want map[uint64]string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		got := e.workers()
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-e.changed:
		case <-deadline:
			t.Fatalf("%s: catalog %v, want %v; source %+v", what, got, want, e.src.Stats())
		}
	}
}

// until waits for cond, re-checking on catalog changes and on a short
// tick (for conditions of the source that change no worker).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not reached in %v", what, waitTimeout)
		}
	}
}

var vllm = map[string]string{"app": "vllm"}

func id(uid string) uint64 { return WorkerID(uid) }

// TestPoolPodsBecomeWorkers: the Ready pods of the pool with an IP become
// workers with the derived endpoints, per data-parallel rank; unready,
// terminating, IP-less and unselected pods do not; the stats and metrics
// count them.
func TestPoolPodsBecomeWorkers(t *testing.T) {
	api := kubetest.NewAPI(t)
	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", vllm, 8000))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "u0", "10.0.0.1", true, vllm))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-1", "u1", "fd00::2", true, map[string]string{"app": "vllm", "role": "decode"}))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-2", "u2", "10.0.0.3", false, vllm))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-3", "u3", "", true, vllm))
	term := kubetest.PodObj(testNS, "vllm-4", "u4", "10.0.0.5", true, vllm)
	kubetest.Meta(term)["deletionTimestamp"] = "2026-01-01T00:01:00Z"
	api.Put("pods", term)
	api.Put("pods", kubetest.PodObj(testNS, "other-0", "u5", "10.0.0.6", true, map[string]string{"app": "other"}))
	api.Put("pods", kubetest.PodObj("elsewhere", "vllm-9", "u9", "10.0.0.9", true, vllm))

	cfg := testConfig()
	cfg.PoolName = "pool"
	cfg.DataParallelSize, cfg.KVEventsPortStride = 2, 2
	cfg.RoleLabel = "role"
	cfg.TotalKVBlocks = 4096
	e := start(t, api, cfg)
	reg := perf.NewRegistry()
	e.src.RegisterMetrics(reg)
	e.waitFor(t, "first membership", map[uint64]string{id("u0"): "http://10.0.0.1:8000", id("u1"): "http://[fd00::2]:8000"})

	recs := e.svc.ListWorkers("llama", "default")
	if len(recs) != 1 {
		t.Fatalf("default group: %d workers", len(recs))
	}
	r := recs[0]
	if r.WorkerID != id("u0") || *r.BlockSize != 16 || *r.DataParallelSize != 2 || *r.TotalKVBlocks != 4096 || r.Lifecycle != core.Schedulable ||
		!maps.Equal(r.KVEventsEndpoints, map[uint32]string{0: "tcp://10.0.0.1:5557", 1: "tcp://10.0.0.1:5559"}) || r.ReplayEndpoint != nil {
		t.Fatalf("vllm-0's record: %+v", r)
	}
	dec := e.svc.ListWorkers("llama", "decode")
	if len(dec) != 1 || !maps.Equal(dec[0].KVEventsEndpoints, map[uint32]string{0: "tcp://[fd00::2]:5557", 1: "tcp://[fd00::2]:5559"}) {
		t.Fatalf("the role label's group: %+v", dec)
	}
	until(t, "stats", func() bool {
		st := e.src.Stats()
		return st.PodsSeen == 6 && st.PodsMatched == 5 && st.PodsReady == 2 && st.Synced && st.PoolResolved && e.src.Ready()
	})
	var b bytes.Buffer
	reg.WritePrometheus(&b)
	for _, want := range []string{"kvselect_kube_pods_seen 6\n", "kvselect_kube_pods_matched 5\n", "kvselect_kube_pods_ready 2\n",
		"kvselect_kube_ready 1\n", `kvselect_kube_errors_total{kind="watch"} 0` + "\n", "# TYPE kvselect_kube_snapshots_total counter\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if q := api.QueriesOf("inferencepools"); len(q) == 0 || !strings.Contains(q[0], "fieldSelector=metadata.name%3Dpool") {
		t.Errorf("pool queries %v: want the pool's name as a field selector", q)
	}
}

// TestPodLifecycle: a booked worker whose pod goes unready is removed and
// its booking released; a deleted pod is removed; an IP change moves the
// worker (same id); a pod recreated under its name is a new worker.
func TestPodLifecycle(t *testing.T) {
	api := kubetest.NewAPI(t)
	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", vllm, 8000))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "a", "10.0.0.1", true, vllm))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-1", "b", "10.0.0.2", true, vllm))
	cfg := testConfig()
	cfg.PoolName = "pool"
	e := start(t, api, cfg)
	both := map[uint64]string{id("a"): "http://10.0.0.1:8000", id("b"): "http://10.0.0.2:8000"}
	e.waitFor(t, "two pods", both)

	req := &core.SelectRequest{ModelName: "llama", SelectionID: "r1", HasSelectionID: true}
	req.TokenIDs, req.HasTokenIDs = make([]uint32, 64), true
	for i := range req.TokenIDs {
		req.TokenIDs[i] = uint32(i)
	}
	var out core.Selection
	if err := e.svc.SelectAndReserve(req, &out); err != nil {
		t.Fatal(err)
	}
	booked := out.WorkerID
	if _, ok := e.svc.Reservation("r1"); !ok || e.svc.Stats().Reservations != 1 {
		t.Fatalf("booking r1 on %d is not live", booked)
	}
	name, uid, ip := "vllm-0", "a", "10.0.0.1"
	otherName, otherUID := "vllm-1", "b"
	if booked == id("b") {
		name, uid, ip, otherName, otherUID = "vllm-1", "b", "10.0.0.2", "vllm-0", "a"
	}

	api.Put("pods", kubetest.PodObj(testNS, name, uid, ip, false, vllm))
	e.waitFor(t, "booked pod unready", map[uint64]string{id(otherUID): both[id(otherUID)]})
	if _, ok := e.svc.Reservation("r1"); ok || e.svc.Stats().Reservations != 0 {
		t.Fatalf("r1 still booked after its worker left: %+v", e.svc.Stats())
	}

	api.Put("pods", kubetest.PodObj(testNS, name, uid, ip, true, vllm))
	e.waitFor(t, "ready again", both)

	api.Remove("pods", testNS, otherName)
	e.waitFor(t, "other pod deleted", map[uint64]string{id(uid): both[id(uid)]})

	api.Put("pods", kubetest.PodObj(testNS, name, uid, "10.0.1.7", true, vllm))
	e.waitFor(t, "IP change", map[uint64]string{id(uid): "http://10.0.1.7:8000"})

	api.Remove("pods", testNS, name)
	api.Put("pods", kubetest.PodObj(testNS, name, uid+"-2", "10.0.1.8", true, vllm))
	e.waitFor(t, "recreated under its name", map[uint64]string{id(uid + "-2"): "http://10.0.1.8:8000"})
}

// TestPoolChanges: membership follows the pool's selector and port; a
// deleted pool empties it (and the source is not ready); a pool without
// labels is unusable; a recreated pool restores it.
func TestPoolChanges(t *testing.T) {
	api := kubetest.NewAPI(t)
	blue, green := map[string]string{"app": "blue"}, map[string]string{"app": "green"}
	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", blue, 8000))
	api.Put("inferencepools", kubetest.PoolObj(testNS, "other-pool", green, 8000))
	api.Put("pods", kubetest.PodObj(testNS, "blue-0", "b0", "10.0.0.1", true, blue))
	api.Put("pods", kubetest.PodObj(testNS, "green-0", "g0", "10.0.0.2", true, green))
	cfg := testConfig()
	cfg.PoolName = "pool"
	e := start(t, api, cfg)
	e.waitFor(t, "blue", map[uint64]string{id("b0"): "http://10.0.0.1:8000"})

	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", green, 8000))
	e.waitFor(t, "selector to green", map[uint64]string{id("g0"): "http://10.0.0.2:8000"})

	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", green, 9000, 9001))
	e.waitFor(t, "target port 9000", map[uint64]string{id("g0"): "http://10.0.0.2:9000"})
	until(t, "ignored ports counted", func() bool { return e.src.Stats().IgnoredTargetPorts == 1 })

	api.Remove("inferencepools", testNS, "pool")
	e.waitFor(t, "pool deleted", map[uint64]string{})
	until(t, "not ready without a pool", func() bool { return !e.src.Ready() && e.src.Stats().PoolErrors == 1 })

	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", map[string]string{}, 8000))
	until(t, "an unusable pool counted", func() bool {
		st := e.src.Stats()
		return st.PoolErrors == 2 && strings.Contains(st.LastError, "matchLabels")
	})

	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", blue, 8000))
	e.waitFor(t, "pool recreated", map[uint64]string{id("b0"): "http://10.0.0.1:8000"})
	if !e.src.Ready() {
		t.Fatal("not ready with a pool")
	}
}

// TestAPIServerRestart: the API server goes down (503) and comes back
// with a new watch cache (every older resource version 410 Expired), and
// pods change meanwhile in ways no watch delivers (a delete, an add, a pod
// going unready): the informers relist and the membership converges. With
// streaming lists and with plain lists.
func TestAPIServerRestart(t *testing.T) {
	for _, mode := range []string{"watch-list", "list"} {
		t.Run(mode, func(t *testing.T) {
			api := kubetest.NewAPI(t)
			api.NoWatchList.Store(mode == "list")
			api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", vllm, 8000))
			api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "a", "10.0.0.1", true, vllm))
			api.Put("pods", kubetest.PodObj(testNS, "vllm-1", "b", "10.0.0.2", true, vllm))
			cfg := testConfig()
			cfg.PoolName = "pool"
			e := start(t, api, cfg)
			e.waitFor(t, "before", map[uint64]string{id("a"): "http://10.0.0.1:8000", id("b"): "http://10.0.0.2:8000"})
			relists := func() int64 { return api.Lists.Load() + api.Streams.Load() }

			// Down: every request fails (the reflectors back off) until it
			// is up again.
			n := relists()
			api.Down.Store(true)
			api.Restart(func() {
				api.Remove("pods", testNS, "vllm-1")
				api.Put("pods", kubetest.PodObj(testNS, "vllm-2", "c", "10.0.0.3", true, vllm))
				api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "a", "10.0.0.1", false, vllm))
			})
			until(t, "requests refused while down", func() bool { return api.Refused.Load() >= 2 })
			api.Down.Store(false)
			e.waitFor(t, "after being down", map[uint64]string{id("c"): "http://10.0.0.3:8000"})
			if relists() == n {
				t.Errorf("converged without a relist")
			}
			until(t, "watch errors counted", func() bool { return e.src.Stats().WatchErrors > 0 })

			// Expired: the watches end and resume from versions the new
			// cache does not have (410: client-go relists without telling
			// the watch-error handler).
			n = relists()
			expired := api.Expired.Load()
			api.Restart(func() {
				api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "a", "10.0.0.1", true, vllm))
				api.Put("pods", kubetest.PodObj(testNS, "vllm-2", "c", "10.0.2.3", true, vllm))
			})
			e.waitFor(t, "after expiry", map[uint64]string{id("a"): "http://10.0.0.1:8000", id("c"): "http://10.0.2.3:8000"})
			if relists() == n {
				t.Errorf("converged without a relist")
			}
			// Whether a reflector resumed its watch (and got 410) or
			// relisted at once depends on timing: a watch that ends within
			// a second of its start makes client-go relist directly.
			t.Logf("watches answered 410 Expired after the restart: %d", api.Expired.Load()-expired)

			// And the new watches deliver again.
			api.Remove("pods", testNS, "vllm-2")
			e.waitFor(t, "events after the restarts", map[uint64]string{id("a"): "http://10.0.0.1:8000"})
		})
	}
}

// TestSelectorMode: with --endpoint-selector the API server filters the
// pods (the selector is in every pod query), the first target port is the
// endpoint, and a pod relabelled out of the selector is removed.
func TestSelectorMode(t *testing.T) {
	api := kubetest.NewAPI(t)
	gpu := map[string]string{"app": "vllm", "tier": "gpu"}
	api.Put("pods", kubetest.PodObj(testNS, "vllm-0", "a", "10.0.0.1", true, gpu))
	api.Put("pods", kubetest.PodObj(testNS, "vllm-1", "b", "10.0.0.2", true, gpu))
	api.Put("pods", kubetest.PodObj(testNS, "cpu-0", "c", "10.0.0.3", true, map[string]string{"app": "vllm", "tier": "cpu"}))
	cfg := testConfig()
	cfg.Selector, cfg.TargetPorts = "app=vllm,tier in (gpu)", []int{8080, 8081}
	cfg.KVEventsPort, cfg.ReplayPort = 0, 5600
	e := start(t, api, cfg)
	e.waitFor(t, "selected", map[uint64]string{id("a"): "http://10.0.0.1:8080", id("b"): "http://10.0.0.2:8080"})
	for _, r := range e.svc.ListWorkers("", "") {
		if len(r.KVEventsEndpoints) != 0 || r.ReplayEndpoint == nil || !strings.HasSuffix(*r.ReplayEndpoint, ":5600") {
			t.Fatalf("record %+v: want no KV endpoints and a replay endpoint", r)
		}
	}
	until(t, "stats", func() bool { st := e.src.Stats(); return st.PodsSeen == 2 && st.Ready() })

	api.Put("pods", kubetest.PodObj(testNS, "vllm-1", "b", "10.0.0.2", true, map[string]string{"app": "vllm", "tier": "cpu"}))
	e.waitFor(t, "relabelled out", map[uint64]string{id("a"): "http://10.0.0.1:8080"})
	qs := api.QueriesOf("pods")
	if len(qs) == 0 {
		t.Fatal("no pod queries")
	}
	for _, q := range qs {
		if !strings.Contains(q, "labelSelector=app%3Dvllm%2Ctier+in+%28gpu%29") {
			t.Errorf("pod query %q lacks the selector", q)
		}
	}
	if len(api.QueriesOf("inferencepools")) != 0 {
		t.Error("selector mode read InferencePools")
	}
}

// Ready is Stats' readiness, for until.
func (st Stats) Ready() bool { return st.Synced && st.PoolResolved }

// TestMembershipDebounced: a burst of changes within the window costs one
// snapshot, and a change that leaves the membership equal sends none.
func TestMembershipDebounced(t *testing.T) {
	api := kubetest.NewAPI(t)
	api.Put("inferencepools", kubetest.PoolObj(testNS, "pool", vllm, 8000))
	cfg := testConfig()
	cfg.PoolName = "pool"
	cfg.Debounce = 300 * time.Millisecond
	e := start(t, api, cfg)
	until(t, "synced", e.src.Ready)
	base := e.src.Stats().Snapshots
	for i := range 20 {
		api.Put("pods", kubetest.PodObj(testNS, fmt.Sprintf("vllm-%02d", i), fmt.Sprint("u", i), fmt.Sprintf("10.0.0.%d", i+1), true, vllm))
	}
	want := map[uint64]string{}
	for i := range 20 {
		want[id(fmt.Sprint("u", i))] = fmt.Sprintf("http://10.0.0.%d:8000", i+1)
	}
	e.waitFor(t, "twenty pods", want)
	if n := e.src.Stats().Snapshots - base; n > 2 {
		t.Errorf("%d snapshots for one burst of 20 pods (debounce 300ms)", n)
	}
	before := e.src.Stats()
	// A change no worker sees: another label.
	api.Put("pods", kubetest.PodObj(testNS, "vllm-00", "u0", "10.0.0.1", true, map[string]string{"app": "vllm", "x": "y"}))
	until(t, "rebuilt", func() bool { return e.src.Stats().Builds > before.Builds })
	if got := e.src.Stats().Snapshots; got != before.Snapshots {
		t.Errorf("an unchanged membership was sent again: %d snapshots, had %d", got, before.Snapshots)
	}
}
