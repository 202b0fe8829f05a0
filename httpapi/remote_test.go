package httpapi_test

import (
	"errors"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
)

// firstPick makes the picker deterministic.
type firstPick struct{}

func (firstPick) IntN(int) int     { return 0 }
func (firstPick) Float64() float64 { return 0 }

// remoteFixture is one standalone indexer (real HTTP on loopback) and two
// selectors over the same KV state: local restores the events into its
// own index, remote asks the indexer through httpapi.RemoteIndex.
type remoteFixture struct {
	ix            *ixHarness
	local, remote *core.Service
	client        *httpapi.RemoteIndex
	prompts       [][]uint32
}

// newRemoteFixture indexes, for workers × 2 ranks, a shared system prompt
// of sys blocks and a per-rank conversation of conv blocks (block size
// 16), a host-pinned continuation on every rank 0, and prompts to query.
func newRemoteFixture(t testing.TB, workers, sys, conv int) *remoteFixture {
	f := &remoteFixture{}
	f.ix = startIndexerTB(t)
	toks := func(base, n int) []uint32 {
		out := make([]uint32, n*16)
		for i := range out {
			out[i] = uint32(base + i)
		}
		return out
	}
	seed := radix.HashSeed("", "")
	var evs []core.Event
	for w := range workers {
		for r := range 2 {
			prompt := append(toks(1, sys), toks(1_000_000*(w*2+r+1), conv)...)
			f.prompts = append(f.prompts, append(prompt, toks(7, 4)...))
			local := radix.LocalHashes(nil, prompt, 16, seed)
			k := core.WorkerKey{WorkerID: uint64(w + 1), DPRank: uint32(r)}
			ev := core.Event{Worker: k, Kind: radix.Stored}
			for i, l := range local {
				ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(w<<40|r<<32|i) + 1, Local: l})
			}
			evs = append(evs, ev)
			if r == 0 {
				host := radix.LocalHashes(nil, toks(7, 2), 16, seed)
				evs = append(evs, core.Event{Worker: k, Kind: radix.Stored, Tier: radix.TierHostPinned, HasParent: true, ParentHash: ev.Blocks[len(ev.Blocks)-1].Hash,
					Blocks: []radix.Block{{Hash: 9e15 + uint64(w), Local: host[0]}}})
			}
		}
	}
	if _, err := f.ix.ix.Restore("m", "g", 16, evs); err != nil {
		t.Fatal(err)
	}
	var err error
	f.client, err = httpapi.NewRemoteIndex(httpapi.RemoteIndexConfig{URL: f.ix.base})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(primary core.PrimaryIndex) *core.Service {
		s, err := core.New(core.DefaultConfig(), core.Options{Primary: primary, Rand: firstPick{}})
		if err != nil {
			t.Fatal(err)
		}
		bs, dp := uint32(16), uint32(2)
		for w := range workers {
			ep, kv := "http://w", map[uint32]string{0: "tcp://127.0.0.1:5557", 1: "tcp://127.0.0.1:5558"}
			if _, err := s.UpsertWorker(&core.WorkerSpec{WorkerID: uint64(w + 1), ModelName: "m", RoutingGroup: "g",
				WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp, KVEventsEndpoints: kv}}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	f.local, f.remote = mk(nil), mk(f.client)
	if n, err := f.local.Restore("m", "g", 16, evs); err != nil || n != len(evs) {
		t.Fatalf("local restore %d %v", n, err)
	}
	return f
}

func startIndexerTB(t testing.TB) *ixHarness {
	ix, err := core.NewIndexer(core.DefaultIndexerConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.NewIndexer(ix, httpapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &ixHarness{base: serveLoopback(t, srv), ix: ix}
}

// TestRemoteIndexMatchesLocal: a selector whose primary index is a
// standalone indexer reached over HTTP scores, overlaps and picks exactly
// as a selector holding the same state in its own index, lower tiers
// included; its /dump has no primary events.
func TestRemoteIndexMatchesLocal(t *testing.T) {
	f := newRemoteFixture(t, 4, 8, 8)
	for i, p := range f.prompts {
		q := &core.QueryRequest{ModelName: "m", RoutingGroup: "g", Prompt: core.Prompt{TokenIDs: p, HasTokenIDs: true}}
		ol, err := f.local.OverlapScores(q)
		if err != nil {
			t.Fatal(err)
		}
		or, err := f.remote.OverlapScores(q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ol, or) {
			t.Fatalf("prompt %d: overlap local %+v, remote %+v", i, ol.Workers, or.Workers)
		}
		var sl, sr core.Selection
		req := core.SelectRequest{ModelName: "m", RoutingGroup: "g", Prompt: q.Prompt}
		if err := f.local.Select(&req, &sl); err != nil {
			t.Fatal(err)
		}
		if err := f.remote.Select(&req, &sr); err != nil {
			t.Fatal(err)
		}
		if sl.WorkerID != sr.WorkerID || sl.DPRank != sr.DPRank || !reflect.DeepEqual(sl.Overlap, sr.Overlap) || sl.EffectivePrefillTokens != sr.EffectivePrefillTokens {
			t.Fatalf("prompt %d: local picked %d/%d %+v, remote %d/%d %+v", i, sl.WorkerID, sl.DPRank, sl.Overlap, sr.WorkerID, sr.DPRank, sr.Overlap)
		}
		if i == 0 && ol.Workers[0].HostPinnedExtensionBlocks == 0 {
			t.Fatal("the fixture has no lower-tier hit: the test proves less than it claims")
		}
	}
	for _, d := range f.remote.Dump() {
		if len(d.Events) != 0 {
			t.Fatalf("remote selector dumps primary events: %+v", d)
		}
	}
	if st := f.client.Stats(); st.OK == 0 || st.Refused+st.Deadline+st.Status+st.Decode != 0 {
		t.Fatalf("client stats %+v", st)
	}
}

// TestRemoteIndexDown: with the indexer unreachable, hung or without the
// partition, a selection fails at once (or at its deadline) as not ready
// with the reference's "Indexer is offline", never hangs.
func TestRemoteIndexDown(t *testing.T) {
	refusedURL := "http://" + refusedAddr
	hung, _ := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ix := startIndexerTB(t) // up, but has no partition "m:g": 404
	for _, tc := range []struct {
		name, url string
		stat      func(httpapi.RemoteIndexStats) uint64
	}{
		{"refused", refusedURL, func(s httpapi.RemoteIndexStats) uint64 { return s.Refused }},
		{"hung", "http://" + hung.Addr().String(), func(s httpapi.RemoteIndexStats) uint64 { return s.Deadline }},
		{"no partition", ix.base, func(s httpapi.RemoteIndexStats) uint64 { return s.Status }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := httpapi.NewRemoteIndex(httpapi.RemoteIndexConfig{URL: tc.url, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := core.New(core.DefaultConfig(), core.Options{Primary: client})
			ep, bs := "http://w", uint32(4)
			if _, err := s.UpsertWorker(&core.WorkerSpec{WorkerID: 1, ModelName: "m", RoutingGroup: "g", WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
				t.Fatal(err)
			}
			var out core.Selection
			err = s.Select(&core.SelectRequest{ModelName: "m", RoutingGroup: "g", Prompt: core.Prompt{TokenIDs: []uint32{1, 2, 3, 4}, HasTokenIDs: true}}, &out)
			if !errors.Is(err, core.ErrNotReady) || err.Error() != "Indexer is offline" {
				t.Fatalf("select: %v", err)
			}
			if tc.stat(client.Stats()) != 1 {
				t.Fatalf("stats %+v", client.Stats())
			}
		})
	}
	if _, err := httpapi.NewRemoteIndex(httpapi.RemoteIndexConfig{URL: "ftp://x"}); err == nil || err.Error() != "remote indexer URL must start with http:// or https://: ftp://x" {
		t.Fatalf("bad URL: %v", err)
	}
}

// BenchmarkRemoteIndexSelect measures, in one run, a /select's cost in the
// service (core.Service.Select, no HTTP in front) with the local index and
// with a standalone indexer on loopback as the primary index: 8 workers
// of 2 ranks, prompts of 32 blocks (block size 16) sharing 16 blocks. The
// difference is the latency the remote index adds per selection.
func BenchmarkRemoteIndexSelect(b *testing.B) {
	f := newRemoteFixture(b, 8, 16, 16)
	for _, c := range []struct {
		name string
		s    *core.Service
	}{{"local", f.local}, {"remote", f.remote}} {
		b.Run(c.name, func(b *testing.B) {
			var out core.Selection
			reqs := make([]core.SelectRequest, len(f.prompts))
			for i, p := range f.prompts {
				reqs[i] = core.SelectRequest{ModelName: "m", RoutingGroup: "g", Prompt: core.Prompt{TokenIDs: p, HasTokenIDs: true}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := c.s.Select(&reqs[i%len(reqs)], &out); err != nil {
					b.Fatal(err)
				}
			}
		})
		// 64 concurrent selections: throughput over the pooled connections.
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out core.Selection
				i := 0
				for pb.Next() {
					req := core.SelectRequest{ModelName: "m", RoutingGroup: "g", Prompt: core.Prompt{TokenIDs: f.prompts[i%len(f.prompts)], HasTokenIDs: true}}
					if err := c.s.Select(&req, &out); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// TestRemoteIndexSelectAllocs: a warmed-up selection over the remote index
// allocates nothing, client and indexer server together (the counts are
// process-wide).
func TestRemoteIndexSelectAllocs(t *testing.T) {
	if httpapi.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	f := newRemoteFixture(t, 2, 4, 4)
	req := core.SelectRequest{ModelName: "m", RoutingGroup: "g", Prompt: core.Prompt{TokenIDs: f.prompts[0], HasTokenIDs: true}}
	var out core.Selection
	if n := testing.AllocsPerRun(200, func() {
		if err := f.remote.Select(&req, &out); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Errorf("%v allocations per remote selection", n)
	}
}
