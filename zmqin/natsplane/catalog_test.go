package natsplane

import (
	"context"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/nats-io/nats.go/jetstream"
)

func spec(id uint64, endpoint string) core.WorkerSpec {
	bs := uint32(blockSize)
	return core.WorkerSpec{WorkerID: id, WorkerFields: core.WorkerFields{Endpoint: &endpoint, BlockSize: &bs}}
}

// startCatalog binds a Catalog on its own connection to url.
func startCatalog(t *testing.T, url string, cfg CatalogConfig) *Catalog {
	t.Helper()
	cfg.Scope = testScope
	c, err := NewCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(dial(t, url)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// endpoints is the schedulable workers' endpoints of svc by id.
func endpoints(svc *core.Service) map[uint64]string {
	out := map[uint64]string{}
	for _, w := range svc.ListWorkers("", "") {
		if w.Lifecycle == core.Schedulable {
			out[w.WorkerID] = *w.Endpoint
		}
	}
	return out
}

// TestCatalogBucket: the replica with the discovery source mirrors it
// into the bucket; another replica's catalog follows the bucket through a
// core.CatalogReconciler. A foreign write is undone by the mirror, a
// malformed value is a counted drop, and a watcher holds at most
// MaxWorkers keys.
func TestCatalogBucket(t *testing.T) {
	srv, err := StartServer(ServerConfig{JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	url := srv.ClientURL()
	mirror := startCatalog(t, url, CatalogConfig{})
	watcher := startCatalog(t, url, CatalogConfig{})

	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	svc, err := core.New(cfg, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	rec, err := core.NewCatalogReconciler(svc, core.ReconcilerConfig{Name: "catalog bucket", Exclusive: true, RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rec.Run(ctx, watcher) }()
	defer func() { cancel(); <-done }()

	if err := mirror.Mirror([]core.WorkerSpec{spec(1, "http://w1"), spec(2, "http://w2")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mirrored catalog on the watcher", func() bool {
		e := endpoints(svc)
		return len(e) == 2 && e[1] == "http://w1" && e[2] == "http://w2"
	})

	// Foreign writes: a changed worker, an extra one, a malformed value.
	js, err := jetstream.New(dial(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), mirror.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"w.1": `{"worker_id":1,"endpoint":"http://rogue","block_size":4}`, "w.3": `{"worker_id":3,"endpoint":"http://w3","block_size":4}`, "w.9": `not json`, "other": `x`} {
		if _, err := kv.Put(context.Background(), k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the mirror to undo them", func() bool {
		keys, err := kv.ListKeys(context.Background())
		if err != nil {
			return false
		}
		var ks []string
		for k := range keys.Keys() {
			ks = append(ks, k)
		}
		e, _ := kv.Get(context.Background(), "w.1")
		return len(ks) == 3 && e != nil && string(e.Value()) != `{"worker_id":1,"endpoint":"http://rogue","block_size":4}` // w.1, w.2, other
	})
	eventually(t, "the watcher back to the source's catalog", func() bool {
		e := endpoints(svc)
		return len(e) == 2 && e[1] == "http://w1" && e[2] == "http://w2"
	})
	if st := watcher.Stats(); st.Dropped == 0 {
		t.Errorf("watcher dropped nothing: %+v", st)
	}
	if st := mirror.Stats(); st.Deletes < 2 || st.Writes < 3 {
		t.Errorf("mirror %+v", st)
	}

	// The source drops worker 2.
	if err := mirror.Mirror([]core.WorkerSpec{spec(1, "http://w1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker 2 gone on the watcher", func() bool { return len(endpoints(svc)) == 1 })

	// A watcher's bound.
	if err := mirror.Mirror([]core.WorkerSpec{spec(1, "http://w1"), spec(2, "http://w2"), spec(3, "http://w3")}); err != nil {
		t.Fatal(err)
	}
	small := startCatalog(t, url, CatalogConfig{MaxWorkers: 2})
	eventually(t, "the bounded watcher", func() bool { st := small.Stats(); return st.Workers == 2 && st.Dropped >= 1 })
	if st := small.Stats(); st.MaxWorkers != 2 {
		t.Errorf("%+v", st)
	}
}
