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
// returns them; /workers names the source "nats". The test routes pause
// a bus rank (its events are dropped and counted, its blocks kept) and
// resume it (the events missed meanwhile are a gap: the rank is cleared
// and the next event applied).
func TestIndexerEventPlaneProcess(t *testing.T) {
	natsPort := freePort(t)
	s := &selector{t: t, http: freePort(t), env: []string{"DYN_EVENT_PLANE=nats", "DYN_KV_INDEXER_TEST_ENDPOINTS=true"}}
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
	// publish sends worker id's event eventID storing blocks [from, to)
	// of the prompt, in envelope seq of publisher 0xfeed+id.
	publish := func(id, eventID, seq uint64, from, to int) {
		t.Helper()
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: id}, EventID: eventID, Kind: radix.Stored}
		if from > 0 {
			ev.ParentHash, ev.HasParent = id*100+uint64(from-1), true
		}
		for b := from; b < to; b++ {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: id*100 + uint64(b), Local: local[b]})
		}
		body := natsplane.AppendEnvelope(nil, 0xfeed+id, seq, uint64(time.Now().UnixMilli()), natsplane.TopicKVEvents, natsplane.AppendRouterEvents(nil, []radix.Event{ev}))
		if err := nc.Publish("namespace.dynamo.component.backend.endpoint.generate.kv-events", body); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	publish(7, 1, 0, 0, 2)
	publish(8, 1, 0, 0, 3)
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
	if body := s.must("GET", "/workers", "", 200); strings.Count(body, `"source":"nats"`) != 2 {
		t.Fatalf("/workers sources: %s", body)
	}

	// Worker 7 paused: its event storing block 2 is dropped, its blocks
	// stay, and a second pause is a conflict.
	s.must("POST", "/test/pause_listener", `{"instance_id":7}`, 200)
	if body, code := s.do("POST", "/test/pause_listener", `{"instance_id":7,"dp_rank":0}`); code != 409 || body != `{"error":"instance 7 dp_rank 0 cannot be paused from status paused"}` {
		t.Fatalf("second pause: %d %s", code, body)
	}
	if body := s.must("GET", "/workers", "", 200); !strings.Contains(body, `"instance_id":7,"source":"nats","status":"paused"`) {
		t.Fatalf("/workers while paused: %s", body)
	}
	publish(7, 2, 1, 2, 3)
	s.eventually("the paused rank's event dropped", func() bool {
		return s.metric(`kvselect_event_plane_kv_dropped_total{reason="paused"}`) == "1"
	})
	if q := s.must("POST", "/query", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12]}`, 200); !strings.Contains(q, `"scores":{"7":{"0":8},"8":{"0":12}}`) {
		t.Fatalf("/query while paused: %s", q)
	}

	// Resumed: event 3 follows the missed event 2, so the rank is
	// cleared before event 3 (block 0 again) is applied.
	s.must("POST", "/test/resume_listener", `{"instance_id":7}`, 200)
	if body, code := s.do("POST", "/test/resume_listener", `{"instance_id":7}`); code != 409 {
		t.Fatalf("second resume: %d %s", code, body)
	}
	publish(7, 3, 2, 0, 1)
	s.eventually("the event after the gap applied", func() bool {
		return s.metric("kvselect_event_plane_kv_events_applied_total") == "3"
	})
	if q := s.must("POST", "/query", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12]}`, 200); !strings.Contains(q, `"scores":{"7":{"0":4},"8":{"0":12}}`) {
		t.Fatalf("/query after the resume: %s", q)
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
