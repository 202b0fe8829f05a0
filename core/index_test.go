package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
)

// TestIndexConfigRejected pins the start-up errors of the index shapes
// (Dynamo's IndexerPolicy::from_router_config and with_remote_indexer).
func TestIndexConfigRejected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.PredictedTTL = time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "router_predicted_ttl_secs requires use_kv_events=true") {
		t.Errorf("predicted TTL without KV events: %v", err)
	}
	cfg = DefaultConfig()
	cfg.UseKVEvents = false
	if _, err := New(cfg, Options{Primary: failingIndex{}}); err == nil || !strings.Contains(err.Error(), "a remote indexer requires use_kv_events=true") {
		t.Errorf("remote primary without KV events: %v", err)
	}
	cfg = DefaultConfig()
	cfg.ApproxTTL = -time.Second
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("negative TTL: %v", err)
	}
}

// failingIndex is a primary index that cannot answer, as a remote index
// whose server is down.
type failingIndex struct{}

func (failingIndex) MatchPrefix(string, string, []uint64, *radix.Result) error {
	return errors.New("connection refused")
}

// TestRemotePrimaryOffline: a primary index that fails turns selections
// into the reference's not-ready "Indexer is offline", and the service
// neither listens to KV events nor requires kv_events endpoints.
func TestRemotePrimaryOffline(t *testing.T) {
	ing := &recIngress{ranks: map[uint64][]RankSource{}}
	s, err := New(DefaultConfig(), Options{Primary: failingIndex{}, Ingress: ing})
	if err != nil {
		t.Fatal(err)
	}
	bs := uint32(4)
	rec, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: ptr("http://w1"), BlockSize: &bs}})
	if err != nil || rec.Lifecycle != Schedulable {
		t.Fatalf("worker without kv_events endpoint: %+v %v", rec, err)
	}
	if log := ing.take(); log != "(none)" {
		t.Errorf("ingress called with a remote primary: %s", log)
	}
	var out Selection
	err = s.Select(&SelectRequest{Prompt: Prompt{TokenIDs: []uint32{1, 2, 3, 4}, HasTokenIDs: true}}, &out)
	if !errors.Is(err, ErrNotReady) || err.Error() != "Indexer is offline" {
		t.Errorf("select: %v", err)
	}
	if d := s.Dump(); len(d) != 1 || len(d[0].Events) != 0 {
		t.Errorf("dump with a remote primary: %+v", d)
	}
}

func ptr[T any](v T) *T { return &v }

// TestApproximateRestore: a selector without KV events restores a peer's
// approximate dump; the restored predictions match the peer's and expire
// one TTL after the restore (the fake clock).
func TestApproximateRestore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.ApproxTTL = 10 * time.Second
	mk := func() *Service {
		s, err := New(cfg, Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		bs := uint32(4)
		for id := range uint64(2) {
			if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, WorkerFields: WorkerFields{Endpoint: ptr("http://w"), BlockSize: &bs}}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	a := mk()
	var out Selection
	req := SelectRequest{Prompt: Prompt{TokenIDs: iota32(16), HasTokenIDs: true}, PinnedWorker: &radix.WorkerKey{WorkerID: 1}}
	if err := a.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	b := mk()
	for _, d := range a.Dump() {
		if n, err := b.Restore(d.ModelName, d.RoutingGroup, d.BlockSize, d.Events); err != nil || n != len(d.Events) {
			t.Fatalf("restore: %d of %d, %v", n, len(d.Events), err)
		}
	}
	q := &QueryRequest{Prompt: Prompt{TokenIDs: iota32(16), HasTokenIDs: true}}
	oa, _ := a.OverlapScores(q)
	ob, _ := b.OverlapScores(q)
	if oa.Workers[1].DeviceBlocks != 4 || ob.Workers[1].DeviceBlocks != 4 {
		t.Fatalf("restored overlap %+v, peer's %+v", ob.Workers, oa.Workers)
	}
	if st := b.Stats().Approx; st.Blocks != 4 {
		t.Fatalf("restored blocks are not timed: %+v", st)
	}
	now = now.Add(10 * time.Second)
	if n := b.ExpireIndex(now); n != 4 {
		t.Fatalf("expired %d restored blocks one TTL after the restore, want 4", n)
	}
}
