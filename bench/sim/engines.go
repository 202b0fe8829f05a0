package sim

import (
	"errors"
	"fmt"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// simEngine is one worker: the engine model, and for the selector's
// policies the publisher of its KV events. It is the model's Sink: each
// change the pool makes is queued on the publisher, with the tokens of the
// stored blocks, until the next sync flushes it.
type simEngine struct {
	eng *vllm.Engine
	pub *bench.KVPublisher // nil: nothing is published (local policies)
	w   *workload
	bs  int
	tok []uint32
	// sentinel is the engine hash of the sync block this engine published
	// last (0: none); see syncBlock.
	sentinel uint64
}

// syncReplayBatches is each publisher's replay ring: the selector's
// listeners replay from it only after a gap, which loopback does not have,
// and a ring of the default 10,000 batches held 1.3 GB over a
// 12,000-request trace (every batch keeps its stored blocks' tokens).
const syncReplayBatches = 256

// newEngines starts load.Workers engines; with publish, each with a PUB
// and a replay socket on a free loopback port.
func newEngines(load *bench.Config, cfg *Config, w *workload, publish bool) ([]*simEngine, error) {
	es := make([]*simEngine, load.Workers)
	for i := range es {
		s := &simEngine{w: w, bs: load.BlockSize}
		if publish {
			pub, err := bench.NewKVPublisher(bench.EngineConfig{BlockSize: load.BlockSize, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBuffer: syncReplayBatches})
			if err != nil {
				closeEngines(es)
				return nil, err
			}
			s.pub = pub
		}
		eng, err := vllm.New(cfg.engineConfig(load.BlockSize), s)
		if err != nil {
			closeEngines(es)
			return nil, err
		}
		s.eng = eng
		es[i] = s
	}
	return es, nil
}

func closeEngines(es []*simEngine) {
	for _, s := range es {
		if s != nil && s.pub != nil {
			_ = s.pub.Close()
		}
	}
}

func (s *simEngine) Stored(r *vllm.Request, from, to int) {
	if s.pub == nil {
		return
	}
	sr := &s.w.reqs[r.ID]
	s.tok = bench.AppendStreamTokens(s.tok[:0], sr.p, sr.next, from*s.bs, to*s.bs)
	var parent uint64
	if from > 0 {
		parent = r.Hashes[from-1]
	}
	s.pub.Stored(parent, from > 0, r.Hashes[from:to], s.tok)
}

func (s *simEngine) Removed(h uint64) {
	if s.pub != nil {
		s.pub.Removed(h)
	}
}

// syncBlock returns round k's sync block: bs tokens outside every
// workload's vocabulary (ids from 2^31), its local hash and an engine
// hash no prompt block has. Before the selector routes a request, every
// engine with queued changes appends "remove my previous sync block,
// store round k's" to them and publishes the batch; the selector applies
// a worker's events in order, so once /overlap_scores shows round k's
// block on a worker, everything that worker's engine published before is
// applied too. Sync blocks match no prompt, so they change no score.
func syncBlock(k uint64, bs int, dst []uint32) (tokens []uint32, local, engine uint64) {
	for j := range bs {
		dst = append(dst, uint32(1<<31+(k*uint64(bs)+uint64(j))%(1<<31)))
	}
	return dst, bench.LocalHash(dst), 0x5e17<<48 | k
}

// flush publishes the engine's queued changes closed by round k's sync
// block; it reports false when there was nothing to publish.
func (s *simEngine) flush(k uint64, tokens []uint32, engineHash uint64) bool {
	if s.pub == nil || s.pub.Pending() == 0 {
		return false
	}
	if s.sentinel != 0 {
		s.pub.Removed(s.sentinel)
	}
	s.pub.Stored(0, false, []uint64{engineHash}, tokens)
	s.sentinel = engineHash
	return s.pub.Flush()
}

// errNoProgress is a simulation that stalls: requests left but no engine
// can run and none arrives (a bug of the model).
var errNoProgress = errors.New("sim: the engines stopped with requests left")

func noProgress(done, total int) error {
	return fmt.Errorf("%w: %d of %d requests finished", errNoProgress, done, total)
}
