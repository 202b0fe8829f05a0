package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvselect/kvselect/bench"
)

// TestInProcessReplicasMirrorBookings: two in-process replicas meshed over
// loopback ZMQ, the same worker registered on both (its KV events from a
// simulated engine). A booking made over HTTP on either replica becomes a
// mirror on the other: the other's apply stamps the probe's watch, its Go
// API shows the booking live on the worker the first chose, its GET /loads
// counts it, and it accepts the booking's lifecycle calls; the free made
// on the first removes it everywhere.
func TestInProcessReplicasMirrorBookings(t *testing.T) {
	eng, err := bench.NewEngine(bench.EngineConfig{Ranks: 1, BlockSize: 16, CapacityBlocks: 64, Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	reps, stop, err := inProcessReplicas(true)(2)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Profiling: both replicas name the process's one debug listener.
	if reps[0].PprofURL == "" || reps[0].PprofURL != reps[1].PprofURL {
		t.Fatalf("pprof URLs %q %q, want one shared", reps[0].PprofURL, reps[1].PprofURL)
	}
	if resp, err := http.Get(reps[0].PprofURL + "/cmdline"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s/cmdline: %v %v", reps[0].PprofURL, resp, err)
	} else {
		resp.Body.Close()
	}
	ctls := make([]*bench.Control, len(reps))
	for i, r := range reps {
		if ctls[i], err = bench.NewControl(fmt.Sprintf("replica %d", i), r.URL, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		defer ctls[i].Close()
		w := bench.WorkerRequest{WorkerID: 7, Endpoint: "http://w7:8000", BlockSize: 16, DPSize: 1, KVEventsEndpoints: map[string]string{"0": eng.Endpoints()[0]}}
		if err := ctls[i].RegisterWorker(&w); err != nil {
			t.Fatal(err)
		}
		if err := ctls[i].WaitReady(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// A stamp that never comes fails the test; the wait is a deadline, not
	// a timing assertion.
	await := func(ch <-chan time.Time, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not applied by the peer", what)
		}
	}
	active := func(c *bench.Control) int64 {
		t.Helper()
		n, err := c.ActiveRequests()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for a := range reps {
		b := 1 - a
		id := fmt.Sprintf("mirror-%d", a)
		booked, disarm := reps[b].Probe.Arm(id, bench.ChangeBooked)
		resp, err := ctls[a].Call("POST", "/select_and_reserve", []byte(`{"selection_id":"`+id+`","block_hashes":[1,2],"sequence_hashes":[1,2],"isl_tokens":32}`))
		if err != nil {
			t.Fatal(err)
		}
		var sel struct {
			WorkerID uint64 `json:"worker_id"`
		}
		if err := json.Unmarshal(resp, &sel); err != nil || sel.WorkerID != 7 {
			t.Fatalf("booking on replica %d: %s (%v)", a, resp, err)
		}
		await(booked, id+" booked")
		disarm()
		if w, ok := reps[b].Probe.Mirror(id); !ok || w != 7 {
			t.Fatalf("replica %d: mirror of %s: worker %d, %v", b, id, w, ok)
		}
		if _, ok := reps[a].Probe.Mirror(id); ok {
			t.Fatalf("replica %d reports its own booking %s as a mirror", a, id)
		}
		if na, nb := active(ctls[a]), active(ctls[b]); na != 1 || nb != 1 {
			t.Fatalf("active requests: booking replica %d, peer %d; want 1 and 1", na, nb)
		}
		if _, err := ctls[b].Call("POST", "/reservations/"+id+"/prefill_complete", nil); err != nil {
			t.Fatalf("prefill_complete of the mirror on replica %d: %v", b, err)
		}
		freed, disarm := reps[b].Probe.Arm(id, bench.ChangeFreed)
		if _, err := ctls[a].Call("DELETE", "/reservations/"+id, nil); err != nil {
			t.Fatal(err)
		}
		await(freed, id+" freed")
		disarm()
		if _, ok := reps[b].Probe.Mirror(id); ok {
			t.Fatalf("replica %d: %s still mirrored after the free", b, id)
		}
		if na, nb := active(ctls[a]), active(ctls[b]); na != 0 || nb != 0 {
			t.Fatalf("active requests after the free: %d and %d", na, nb)
		}
	}
	for i, r := range reps {
		c := r.Probe.Counters()
		if c["mesh_published"] == 0 || c["replica_applied"] == 0 || c["mesh_outbound_dropped"] != 0 || c["replica_dropped_unknown_worker"] != 0 {
			t.Fatalf("replica %d counters %v", i, c)
		}
	}
}

// TestBenchReplicasAndDisagg runs `kvselect bench --replicas 2` and `--mix
// disagg` against in-process kvselect: both complete without errors or
// leaks; the replica run reports the throughput ratio to one replica and
// the propagation lag, with every probed booking visible on the peer; the
// disagg run reports its ratio to the no-op.
func TestBenchReplicasAndDisagg(t *testing.T) {
	run := func(extra ...string) []byte {
		t.Helper()
		raw, out := smallBench(t, "400ms", extra...)
		t.Logf("%q:\n%s", extra, out)
		return raw
	}
	type result struct {
		Requests int64            `json:"requests"`
		Errors   map[string]int64 `json:"errors"`
		ByRoute  map[string]int64 `json:"requests_by_route"`
	}
	var rr struct {
		result
		Leaked   *int64 `json:"leaked_reservations"`
		Replicas *struct {
			Single      *result  `json:"single_replica"`
			Ratio       *float64 `json:"throughput_ratio"`
			Propagation *struct {
				Probes     int64    `json:"probes"`
				BookedP50  *float64 `json:"booked_p50_ms"`
				BookedP99  *float64 `json:"booked_p99_ms"`
				FreedP99   *float64 `json:"freed_p99_ms"`
				NotVisible int64    `json:"not_visible"`
				NotFreed   int64    `json:"not_freed"`
				NotSent    int64    `json:"not_sent"`
			} `json:"propagation"`
		} `json:"replicas"`
	}
	raw := run("--replicas", "2")
	if err := json.Unmarshal(raw, &rr); err != nil {
		t.Fatal(err)
	}
	r := rr.Replicas
	if rr.Requests == 0 || len(rr.Errors) != 0 || rr.Leaked == nil || *rr.Leaked != 0 || r == nil || r.Single == nil ||
		r.Single.Requests == 0 || len(r.Single.Errors) != 0 || r.Ratio == nil || !(*r.Ratio > 0) {
		t.Fatalf("replica run: %s", raw)
	}
	if p := r.Propagation; p == nil || p.Probes == 0 || p.NotVisible != 0 || p.NotFreed != 0 || p.NotSent != 0 || p.BookedP50 == nil || p.BookedP99 == nil || p.FreedP99 == nil {
		t.Fatalf("propagation: %s", raw)
	}

	var dr struct {
		result
		Leaked *int64 `json:"leaked_reservations"`
		Ratios *struct {
			Throughput float64 `json:"throughput"`
		} `json:"ratios"`
		Fill *struct{ Prompts, Batches int } `json:"fill"`
	}
	raw = run("--mix", "disagg")
	if err := json.Unmarshal(raw, &dr); err != nil {
		t.Fatal(err)
	}
	if plans := dr.ByRoute["disagg_plan"]; plans == 0 || len(dr.Errors) != 0 || dr.Leaked == nil || *dr.Leaked != 0 ||
		dr.ByRoute["disagg_prefill_complete"] != plans || dr.ByRoute["disagg_delete"] != plans ||
		dr.Ratios == nil || !(dr.Ratios.Throughput > 0) || dr.Fill == nil || dr.Fill.Batches == 0 {
		t.Fatalf("disagg run: %s", raw)
	}
	if code := benchMain(context.Background(), []string{"--replicas", "2", "--target", "http://127.0.0.1:1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("--replicas with --target: exit %d", code)
	}
}
