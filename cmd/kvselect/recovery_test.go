package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
)

// TestServeRecoversIndexFromPeer: `serve --indexer-peers A,B` where A is
// down and B is a live selector: before serving, the new selector restores
// B's index; /ready reports the peer, partitions and events, /metrics the
// counts, and its /dump equals B's.
func TestServeRecoversIndexFromPeer(t *testing.T) {
	defer func(d time.Duration) { recoveryDelay = d }(recoveryDelay)
	recoveryDelay = 0

	// The live peer: an in-process selector whose index holds a prompt.
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	peer, err := core.New(cfg, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(4)
	if _, err := peer.UpsertWorker(&core.WorkerSpec{WorkerID: 1, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored}
	for _, l := range radix.LocalHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, radix.HashSeed("", "")) {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: l + 1, Local: l})
	}
	peer.EventSink(core.DefaultPartition, core.DefaultPartition).ApplyBatch([]radix.Event{ev})
	srv, err := httpapi.New(peer, httpapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	downURL := "http://" + refusedAddr

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan bound, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--indexer-peers", downURL + ",http://" + ln.Addr().String()},
			envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), &logs, ready)
	}()
	var addr string
	select {
	case b := <-ready:
		addr = b.http
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	get := func(path string) string {
		t.Helper()
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	var r struct {
		Recovery core.Recovery `json:"recovery"`
	}
	if err := json.Unmarshal([]byte(get("/ready")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Recovery.Peer != "http://"+ln.Addr().String() || r.Recovery.Partitions != 1 || r.Recovery.Events != 1 || r.Recovery.FailedPeers != 1 {
		t.Fatalf("readiness recovery %+v", r.Recovery)
	}
	if m := get("/metrics"); !strings.Contains(m, "kvselect_recovered_events 1") || !strings.Contains(m, "kvselect_recovery_failed_peers 1") {
		t.Fatalf("metrics lack the recovery:\n%s", m)
	}
	pd, _ := http.Get("http://" + ln.Addr().String() + "/dump")
	want, _ := io.ReadAll(pd.Body)
	pd.Body.Close()
	if got := get("/dump"); got != string(want) {
		t.Fatalf("dump %s, want the peer's %s", got, want)
	}
	if l := logs.String(); !strings.Contains(l, `msg="recovery: index restored"`) || !strings.Contains(l, "partitions=1 events=1 peer=") {
		t.Fatalf("log: %s", logs.String())
	}
	cancel()
	<-done
}
