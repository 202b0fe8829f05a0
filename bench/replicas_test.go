package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeReplica is the Go-API side of a countingTestServer playing a
// replica: its peers' bookings reach it through fakeMesh, which stamps its
// ApplyStamps as a real mesh's applier does.
type fakeReplica struct {
	stamps, sent ApplyStamps
	mu           struct {
		sync.Mutex
		mirrors map[string]bool
		applied uint64
	}
}

func (f *fakeReplica) Arm(id string, kind ReplicaChange) (<-chan time.Time, func()) {
	return f.stamps.Arm(id, kind)
}

func (f *fakeReplica) ArmSent(id string, kind ReplicaChange) (<-chan time.Time, func()) {
	return f.sent.Arm(id, kind)
}

func (f *fakeReplica) Mirror(id string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 1, f.mu.mirrors[id] // the counting server always books worker 1
}

func (f *fakeReplica) Counters() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return map[string]uint64{"applied": f.mu.applied}
}

func (f *fakeReplica) apply(id string, kind ReplicaChange) {
	f.mu.Lock()
	if kind == ChangeBooked {
		f.mu.mirrors[id] = true
	} else {
		delete(f.mu.mirrors, id)
	}
	f.mu.applied++
	f.mu.Unlock()
	if f.stamps.Armed() {
		f.stamps.Applied(id, kind, time.Now())
	}
}

// fakeReplicas starts n counting servers whose bookings and frees reach
// every other one's fakeReplica, unless lossy (a mesh that loses every
// event).
func fakeReplicas(t *testing.T, n int, lossy bool) ([]*countingTestServer, []Replica) {
	fakes := make([]*fakeReplica, n)
	for i := range fakes {
		fakes[i] = &fakeReplica{}
		fakes[i].mu.mirrors = map[string]bool{}
	}
	srvs := make([]*countingTestServer, n)
	reps := make([]Replica, n)
	for i := range srvs {
		to := func(kind ReplicaChange) func(string) {
			return func(id string) {
				if fakes[i].sent.Armed() {
					fakes[i].sent.Applied(id, kind, time.Now())
				}
				for j, f := range fakes {
					if j != i && !lossy {
						f.apply(id, kind)
					}
				}
			}
		}
		srvs[i] = startCountingTestServer(t, func(s *countingTestServer) { s.onBook, s.onFree = to(ChangeBooked), to(ChangeFreed) })
		reps[i] = Replica{URL: srvs[i].url, Probe: fakes[i]}
	}
	return srvs, reps
}

// TestRunReplicas: with two replicas the load alternates between them and
// every lifecycle call goes to the replica that booked (a counting server
// answers 404 for ids it did not book); one replica alone is measured in
// the same run, in windows alternating with the replicas'; the probe sees
// every booking on the other replica and its free, and the report carries
// both figures, in JSON and in the table.
func TestRunReplicas(t *testing.T) {
	var mesh []*countingTestServer
	var single *countingTestServer
	cfg := smallRun("")
	cfg.Replicas = 2
	cfg.ProbeInterval = 5 * time.Millisecond
	starts := 0
	cfg.StartReplicas = func(n int) ([]Replica, func(), error) {
		starts++
		srvs, reps := fakeReplicas(t, n, false)
		if n == 1 {
			single = srvs[0]
		} else {
			mesh = srvs
		}
		return reps, func() {}, nil
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if single == nil || len(mesh) != 2 || starts != 2 {
		t.Fatalf("StartReplicas calls %d: single %v, mesh %d", starts, single != nil, len(mesh))
	}
	// The windows alternate: the one replica was still loaded after the
	// mesh's load had begun.
	single.mu.Lock()
	lastSingle := single.mu.lastReserve
	single.mu.Unlock()
	for i, s := range mesh {
		s.mu.Lock()
		first := s.mu.firstReserve
		s.mu.Unlock()
		if !lastSingle.After(first) {
			t.Fatalf("replica %d first loaded at %v, after the one replica's last booking at %v: the windows did not alternate", i, first, lastSingle)
		}
	}
	if c := single.calls(); c["select_and_reserve"] == 0 || c["active"] != 0 {
		t.Fatalf("single replica saw %v", c)
	}
	for i, s := range mesh {
		c := s.calls()
		if c["select_and_reserve"] == 0 || c["delete"] == 0 || c["workers"] != cfg.Workers || c["active"] != 0 || c["bad_body"] != 0 {
			t.Fatalf("replica %d saw %v", i, c)
		}
	}
	rr := rep.Replicas
	if rep.ErrorCount() != 0 || rep.LeakedReservations != 0 || rr == nil || rr.Single == nil || rr.Single.Requests == 0 ||
		rr.ThroughputRatio <= 0 || len(rr.Counters) != 2 || rr.Rounds != cfg.Rounds {
		t.Fatalf("report: errors %v, leaked %d, replicas %+v", rep.Errors, rep.LeakedReservations, rr)
	}
	pr := rr.Propagation
	if pr == nil || pr.Probes == 0 || pr.NotVisible != 0 || pr.NotFreed != 0 || len(pr.Errors) != 0 {
		t.Fatalf("propagation %+v", pr)
	}
	for i, c := range rr.Counters {
		if c["applied"] == 0 {
			t.Fatalf("replica %d applied nothing from its peer: %v", i, c)
		}
	}

	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	var m struct {
		Replicas map[string]json.RawMessage `json:"replicas"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"replicas", "single_replica", "throughput_ratio", "per_cpu_ratio", "propagation", "replica_counters"} {
		if _, ok := m.Replicas[k]; !ok {
			t.Errorf("JSON replicas lacks %q", k)
		}
	}
	var p map[string]any
	_ = json.Unmarshal(m.Replicas["propagation"], &p)
	for _, k := range []string{"probes", "booked_p50_ms", "booked_p99_ms", "freed_p99_ms", "not_visible", "method"} {
		if _, ok := p[k]; !ok {
			t.Errorf("JSON propagation lacks %q", k)
		}
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"2 replicas meshed", "against 1 replica", "booked: p50", "targets (replicas)"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

// TestRunReplicasLossyMesh: a mesh that loses every event shows in the
// probe as bookings not visible and frees not applied, not as a fast lag.
func TestRunReplicasLossyMesh(t *testing.T) {
	cfg := smallRun("")
	cfg.Replicas = 2
	cfg.Warmup, cfg.Duration, cfg.Rounds = 20*time.Millisecond, 100*time.Millisecond, 1
	cfg.StartReplicas = func(n int) ([]Replica, func(), error) {
		_, reps := fakeReplicas(t, n, true)
		return reps, func() {}, nil
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr := rep.Replicas.Propagation
	if pr == nil || pr.Probes == 0 || pr.NotVisible != pr.Probes || pr.NotFreed != pr.Probes || pr.BookedP99ms != 0 {
		t.Fatalf("propagation %+v", pr)
	}
}
