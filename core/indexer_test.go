package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

func reg(id uint64, rank uint32, model, group string, bs uint32, ep string) *IndexerRegistration {
	return &IndexerRegistration{InstanceID: id, DPRank: rank, ModelName: model, RoutingGroup: group, BlockSize: bs, Endpoint: ep}
}

// TestIndexerRegistry pins the reference registry's rules and texts
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/registry.rs) and the
// ingress calls they make.
func TestIndexerRegistry(t *testing.T) {
	ing := &recIngress{ranks: map[uint64][]RankSource{}}
	cfg := DefaultIndexerConfig()
	cfg.MaxListeners = 4
	ix, err := NewIndexer(cfg, ing)
	if err != nil {
		t.Fatal(err)
	}
	check := func(err error, class error, msg string) {
		t.Helper()
		if class == nil {
			if err != nil {
				t.Fatalf("unexpected %v", err)
			}
			return
		}
		if !errors.Is(err, class) || err.Error() != msg {
			t.Fatalf("got %v, want %v %q", err, class, msg)
		}
	}
	check(ix.Register(reg(1, 0, "m", "", 4, "tcp://127.0.0.1:5557")), nil, "")
	check(ix.Register(reg(1, 1, "m", "default", 4, "tcp://127.0.0.1:5558")), nil, "")
	if got := ing.take(); got != "sync worker=1 bs=4 ranks=[{0 tcp://127.0.0.1:5557 }] sink=indexer\nsync worker=1 bs=4 ranks=[{0 tcp://127.0.0.1:5557 } {1 tcp://127.0.0.1:5558 }] sink=indexer" {
		t.Fatalf("ingress: %s", got)
	}
	check(ix.Register(reg(1, 1, "m", "default", 4, "tcp://127.0.0.1:5559")), ErrConflict, "instance 1 dp_rank 1 already registered")
	check(ix.Register(reg(1, 2, "m", "g2", 4, "tcp://127.0.0.1:5559")), ErrConflict, "instance 1 is already registered for model=m routing_group=default")
	check(ix.Register(reg(2, 0, "m", "", 8, "tcp://127.0.0.1:5559")), ErrConflict, "block_size mismatch for model=m routing_group=default: existing=4, requested=8")
	check(ix.Register(reg(2, 0, "m", "", 4, "udp://h:1")), ErrBadRequest, "invalid ZMQ endpoint `udp://h:1`: unsupported transport \"udp\" (expected tcp:// or ipc://)")
	r := reg(2, 0, "m", "", 4, "tcp://127.0.0.1:5559")
	r.ReplayEndpoint = "nonsense"
	if err := ix.Register(r); !errors.Is(err, ErrBadRequest) || !strings.HasPrefix(err.Error(), "invalid replay endpoint `nonsense`: ") {
		t.Fatalf("replay endpoint: %v", err)
	}
	check(ix.Register(reg(2, 0, "m", "", 0, "tcp://127.0.0.1:5559")), ErrBadRequest, "block_size must be greater than 0")
	check(ix.Register(reg(2, 0, "m", "", 4, "tcp://127.0.0.1:5559")), nil, "")
	check(ix.Register(reg(3, 0, "n", "", 16, "tcp://127.0.0.1:5560")), nil, "")
	check(ix.Register(reg(4, 0, "n", "", 16, "tcp://127.0.0.1:5561")), ErrConflict, "instance 4 dp_rank 0 needs a KV-event listener but all 4 are in use")
	ing.take()

	ws := ix.Workers("", "")
	if len(ws) != 3 || ws[0].InstanceID != 1 || ws[0].Status != "active" || ws[0].BlockSize != 4 || len(ws[0].Listeners) != 2 || ws[2].ModelName != "n" {
		t.Fatalf("workers %+v", ws)
	}
	if ws := ix.Workers("n", ""); len(ws) != 1 || ws[0].InstanceID != 3 {
		t.Fatalf("filtered %+v", ws)
	}

	// Blocks, then unregistration.
	ix.parts.Load()
	sink := (*ix.parts.Load())[partKey{"m", "default"}].sink
	sink.ApplyBatch([]radix.Event{
		{Worker: radix.WorkerKey{WorkerID: 1, DPRank: 1}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 1, Local: 11}}},
		{Worker: radix.WorkerKey{WorkerID: 2}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 2, Local: 11}}},
	})
	var m IndexerMatch
	check(ix.QueryByHash("m", "", []uint64{11}, &m), nil, "")
	if fmt.Sprint(m.Matches) == "" || len(m.Matches) != 2 || m.BlockSize != 4 {
		t.Fatalf("matches %+v", m)
	}
	check(ix.QueryByHash("x", "", []uint64{11}, &m), ErrNotFound, "no indexer for model=x routing_group=default")
	g, rank1, rank7 := "default", uint32(1), uint32(7)
	other := "other"
	check(ix.Unregister(9, "m", &g, nil), ErrNotFound, "instance 9 not found")
	check(ix.Unregister(1, "n", &g, nil), ErrNotFound, "instance 1 is registered for model=m routing_group=default")
	check(ix.Unregister(1, "m", &other, nil), ErrNotFound, "instance 1 is registered for model=m routing_group=default")
	check(ix.Unregister(1, "m", &g, &rank7), ErrNotFound, "instance 1 dp_rank 7 not found")
	check(ix.Unregister(1, "m", &g, &rank1), nil, "")
	if got := ing.take(); !strings.Contains(got, "sync worker=1 bs=4 ranks=[{0 tcp://127.0.0.1:5557 }]") {
		t.Fatalf("rank removal: %s", got)
	}
	check(ix.QueryByHash("m", "", []uint64{11}, &m), nil, "")
	if len(m.Matches) != 1 || m.Matches[0].Worker.WorkerID != 2 {
		t.Fatalf("rank 1's blocks survive its removal: %+v", m.Matches)
	}
	check(ix.Unregister(1, "m", nil, nil), nil, "")
	check(ix.Unregister(2, "m", &g, nil), nil, "")
	if got := ing.take(); got != "detach worker=1\ndetach worker=2" {
		t.Fatalf("detaches: %s", got)
	}
	// The partition left with no instance is gone, as the reference's.
	check(ix.QueryByHash("m", "", []uint64{11}, &m), ErrNotFound, "no indexer for model=m routing_group=default")
	if st := ix.Stats(); st.Workers != 1 || st.Listeners != 1 || st.Partitions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestIndexerEndpointlessRanks: a rank registered with no endpoint is a
// bad request unless IndexerConfig.KVEndpointsOptional says the ingress
// feeds ranks by id (the event plane); then it is synced with Endpoint ""
// beside ZMQ ranks, counts as a listener, and cannot have a replay
// endpoint.
func TestIndexerEndpointlessRanks(t *testing.T) {
	strict, err := NewIndexer(DefaultIndexerConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.Register(reg(1, 0, "m", "", 4, "")); !errors.Is(err, ErrBadRequest) || !strings.HasPrefix(err.Error(), "invalid ZMQ endpoint ``: ") {
		t.Fatalf("endpointless rank without the event plane: %v", err)
	}

	ing := &recIngress{ranks: map[uint64][]RankSource{}}
	cfg := DefaultIndexerConfig()
	cfg.MaxListeners, cfg.KVEndpointsOptional = 2, true
	ix, err := NewIndexer(cfg, ing)
	if err != nil {
		t.Fatal(err)
	}
	r := reg(1, 0, "m", "", 4, "")
	r.ReplayEndpoint = "tcp://127.0.0.1:5600"
	if err := ix.Register(r); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "needs a ZMQ endpoint") {
		t.Fatalf("replay without an endpoint: %v", err)
	}
	if err := ix.Register(reg(1, 0, "m", "", 4, "")); err != nil {
		t.Fatal(err)
	}
	if err := ix.Register(reg(1, 1, "m", "", 4, "tcp://127.0.0.1:5601")); err != nil {
		t.Fatal(err)
	}
	if got := ing.take(); got != "sync worker=1 bs=4 ranks=[{0  }] sink=indexer\nsync worker=1 bs=4 ranks=[{0  } {1 tcp://127.0.0.1:5601 }] sink=indexer" {
		t.Fatalf("ingress: %s", got)
	}
	if err := ix.Register(reg(2, 0, "m", "", 4, "")); !errors.Is(err, ErrConflict) {
		t.Fatalf("an endpointless rank past MaxListeners: %v", err)
	}
	ws := ix.Workers("", "")
	if len(ws) != 1 || ws[0].Endpoints[0] != "" || ws[0].Listeners[0].Status != "active" || ws[0].Listeners[1].Endpoint != "tcp://127.0.0.1:5601" {
		t.Fatalf("workers %+v", ws)
	}
}

func TestIndexerPeers(t *testing.T) {
	cfg := DefaultIndexerConfig()
	cfg.MaxPeers = 2
	ix, _ := NewIndexer(cfg, nil)
	for _, u := range []string{"http://b", "http://a", "http://a"} {
		if err := ix.RegisterPeer(u); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.RegisterPeer("http://c"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("past the cap: %v", err)
	}
	if got := ix.Peers(); fmt.Sprint(got) != "[http://a http://b]" {
		t.Fatal(got)
	}
	if err := ix.DeregisterPeer("http://z"); !errors.Is(err, ErrNotFound) || err.Error() != "peer not found" {
		t.Fatal(err)
	}
	if err := ix.DeregisterPeer("http://a"); err != nil {
		t.Fatal(err)
	}
}
