package core

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// firstRand makes the picker deterministic: ties go to the first candidate.
type firstRand struct{}

func (firstRand) IntN(int) int     { return 0 }
func (firstRand) Float64() float64 { return 0 }

// env is the state of one scenario: a service on a fake clock, with a
// recording ingress and replica sink.
type env struct {
	t       *testing.T
	now     time.Time
	s       *Service
	cfg     Config
	ingress *recIngress
	replica *recReplica
	// affinity records the published session bindings; holds and leases
	// are the table-level commands' (scenario_session_test.go).
	affinity *recAffinity
	holds    map[string]*affinityHold
	leases   map[string]*affinityLease
	// recon is the scenario's catalog reconciler, once made.
	recon *reconState
}

// recLog is a recorder's log of lines, taken (and emptied) by a scenario
// step.
type recLog struct {
	mu  sync.Mutex
	log []string
}

// take returns the lines logged since the last take, "(none)" if none.
func (r *recLog) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := strings.Join(r.log, "\n")
	r.log = nil
	if out == "" {
		return "(none)"
	}
	return out
}

// recIngress records the Ingress calls and reports every synced rank as
// live.
type recIngress struct {
	recLog
	ranks map[uint64][]RankSource
}

func (r *recIngress) Sync(id uint64, bs int, ranks []RankSource, sink EventSink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("sync worker=%d bs=%d ranks=%v sink=%s", id, bs, ranks, sinkName(sink)))
	r.ranks[id] = slices.Clone(ranks)
}

func sinkName(s EventSink) string {
	if ps, ok := s.(*partitionSink); ok {
		return ps.p.model + ":" + ps.p.group
	}
	return "indexer"
}

func (r *recIngress) Detach(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("detach worker=%d", id))
	delete(r.ranks, id)
}

func (r *recIngress) Status(id uint64, dst []RankStatus) []RankStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.ranks[id] {
		dst = append(dst, RankStatus{DPRank: rs.DPRank, Endpoint: rs.Endpoint, State: "live"})
	}
	return dst
}

func (r *recIngress) Close() error { return nil }

// recReplica records the outbound replica events.
type recReplica struct{ recLog }

func (r *recReplica) Publish(ev *ReplicaEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := fmt.Sprintf("%s %s:%s bs=%d id=%s worker=%s", [...]string{"?", "add", "prefill_completed", "free"}[ev.Kind], ev.ModelName, ev.RoutingGroup, ev.BlockSize, ev.RequestID, ev.Worker)
	if ev.Kind == ReplicaAdd {
		line += fmt.Sprintf(" seq=%v track=%t eff=%d", ev.SequenceHashes, ev.TrackPrefillTokens, ev.EffectivePrefillTokens)
		if ev.ExpectedOutputTokens != nil {
			line += fmt.Sprintf(" expected=%d", *ev.ExpectedOutputTokens)
		}
	}
	r.log = append(r.log, line)
}

func newEnv(t *testing.T, cfg Config) *env {
	e := &env{t: t, now: time.Unix(1_700_000_000, 0), cfg: cfg, ingress: &recIngress{ranks: map[uint64][]RankSource{}}, replica: &recReplica{}, affinity: &recAffinity{}}
	s, err := New(cfg, Options{Clock: func() time.Time { return e.now }, Rand: firstRand{}, Ingress: e.ingress, Replica: e.replica, Affinity: e.affinity, WriterID: 1, Logf: e.affinity.logf})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	return e
}
