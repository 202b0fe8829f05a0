package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/natsplane"
	"github.com/nats-io/nats.go"
)

// TestIndexerEventPlaneProcess runs `kvselect indexer` (the built binary,
// default flags plus ports, DYN_EVENT_PLANE=nats) with its embedded NATS
// server. Worker 7 comes from --workers with no ZMQ endpoint, worker 8
// from POST /register with "endpoint": ""; KV events published as a
// Dynamo worker publishes them (an envelope of RouterEvents on the
// endpoint's kv-events subject) are stored in the index, and /query
// returns them.
func TestIndexerEventPlaneProcess(t *testing.T) {
	natsPort := freePort(t)
	s := &selector{t: t, http: freePort(t), env: []string{"DYN_EVENT_PLANE=nats"}}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
	s.args = []string{"indexer", "--host", "127.0.0.1", "--port", fmt.Sprint(s.http), "--pprof=false",
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--workers", "7=", "--block-size", "4", "--model-name", "m"}
	s.start()
	s.must("POST", "/register", `{"instance_id":8,"endpoint":"","model_name":"m","block_size":4}`, 201)
	if body := s.must("GET", "/workers", "", 200); !strings.Contains(body, `"listeners":{"0":{"endpoint":"nats","status":"pending"}}`) {
		t.Fatalf("/workers before any event: %s", body)
	}

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Worker 7 holds the prompt's first two blocks, worker 8 its first
	// three, each from its own publisher (scores are in tokens).
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	local := radix.LocalHashes(nil, toks, 4, radix.Seed)
	for i, w := range []struct {
		id     uint64
		blocks int
	}{{7, 2}, {8, 3}} {
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: w.id}, EventID: 1, Kind: radix.Stored}
		for b := range w.blocks {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: w.id*100 + uint64(b), Local: local[b]})
		}
		body := natsplane.AppendEnvelope(nil, 0xfeed+uint64(i), 0, uint64(time.Now().UnixMilli()), natsplane.TopicKVEvents, natsplane.AppendRouterEvents(nil, []radix.Event{ev}))
		if err := nc.Publish("namespace.dynamo.component.backend.endpoint.generate.kv-events", body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.eventually("both workers' events applied", func() bool {
		return s.metric("kvselect_event_plane_kv_events_applied_total") == "2"
	})
	q := s.must("POST", "/query", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12]}`, 200)
	if !strings.Contains(q, `"scores":{"7":{"0":8},"8":{"0":12}}`) {
		t.Fatalf("/query %s", q)
	}
	if body := s.must("GET", "/workers", "", 200); strings.Count(body, `"endpoint":"nats","status":"active"`) != 2 {
		t.Fatalf("/workers after the events: %s", body)
	}
	if v := s.metric(`kvselect_event_plane_kv_dropped_total{reason="unknown_worker"}`); v != "0" {
		t.Errorf("unknown_worker drops %q", v)
	}
}

// TestIndexerEventPlaneFlags: an endpointless --workers entry needs the
// event plane, and serve's bookings and catalog flags are refused.
func TestIndexerEventPlaneFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--workers", "7=", "--block-size", "4"},
		{"--event-plane", "nats", "--event-plane-bookings=false"},
		{"--event-plane", "nats", "--nats-catalog"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a run that got past its configuration stops at once
		if code := runIndexer(ctx, append([]string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--nats-listen", "127.0.0.1:0"}, args...), envOf(nil), io.Discard, nil); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
