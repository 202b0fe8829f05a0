package zmqin

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// indexSink is the test's core.EventSink: a radix.Index, plus hooks.
// Its fields and methods are exported for the external tests.
type indexSink struct {
	ix      *radix.Index
	Applied atomic.Uint64 // events
	Cleared atomic.Uint64 // ClearRank calls
	// Gate, when non-nil, blocks ApplyBatch until it is closed.
	Gate chan struct{}
	// Closed, when set, makes any later call a test failure.
	Closed atomic.Bool
	t      testing.TB
}

func newIndexSink(t testing.TB) *indexSink {
	ix, err := radix.New(radix.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &indexSink{ix: ix, t: t}
}

func (s *indexSink) ApplyBatch(evs []radix.Event) {
	if s.Closed.Load() {
		s.t.Errorf("ApplyBatch of %d events after Detach", len(evs))
	}
	if s.Gate != nil {
		<-s.Gate
	}
	s.ix.ApplyBatch(evs)
	s.Applied.Add(uint64(len(evs)))
}

func (s *indexSink) ClearRank(w radix.WorkerKey) {
	if s.Closed.Load() {
		s.t.Errorf("ClearRank(%v) after Detach", w)
	}
	s.Cleared.Add(1)
	s.ix.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
}

// Depth returns how many leading blocks of tokens worker w holds on the
// device tier.
func (s *indexSink) Depth(w radix.WorkerKey, tokens []uint32) uint32 {
	q := radix.LocalHashes(nil, tokens, testBlockSize, radix.HashSeed("", ""))
	var r radix.Result
	s.ix.Match(q, &r)
	for _, m := range r.Matches {
		if m.Worker == w {
			return m.Device
		}
	}
	return 0
}

const testBlockSize = 4

// tokens returns n blocks of tokens starting at token id from.
func tokens(from uint32, nblocks int) []uint32 {
	ts := make([]uint32, nblocks*testBlockSize)
	for i := range ts {
		ts[i] = from + uint32(i)
	}
	return ts
}

// stored returns a batch with one BlockStored of the given engine hashes
// for toks, chained after parent when parent != 0.
func stored(parent uint64, hashes []uint64, toks []uint32) *WireBatch {
	return &WireBatch{Timestamp: 1.5, HasDPRank: false, Events: []WireEvent{{
		Kind: radix.Stored, BlockHashes: hashes, ParentHash: parent, HasParent: parent != 0,
		TokenIDs: toks, BlockSize: testBlockSize, Medium: "GPU", SpecKind: "full_attention",
	}}}
}

func removed(hashes ...uint64) *WireBatch {
	return &WireBatch{Timestamp: 2.5, Events: []WireEvent{{Kind: radix.Removed, BlockHashes: hashes, Medium: "GPU"}}}
}

func testConfig() Config {
	return Config{Writers: 2, DialBackoffMin: 2 * time.Millisecond, DialBackoffMax: 20 * time.Millisecond, ReplayTimeout: 5 * time.Second}
}

func newIngress(t testing.TB, cfg Config) *Ingress {
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	return in
}

// refusedEndpoint is a loopback endpoint nothing listens on: port 1 is
// below the kernel's ephemeral range, so no socket of a test is ever given
// it (a port freed by closing a listener can be handed to the next one,
// and an "unreachable" rank would then connect).
const refusedEndpoint = "tcp://127.0.0.1:1"

// freeEndpoint returns a tcp endpoint on loopback with a port that was free
// a moment ago, for a test that binds it later.
func freeEndpoint(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	_ = ln.Close()
	return ep
}

func status(in *Ingress, id uint64) []core.RankStatus { return in.Status(id, nil) }
