package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
)

// TestRecoverFromPeerDump: a selector recovers its index from the first
// peer that answers GET /dump: an unreachable peer and one answering 500
// are skipped (and reported), the live peer's partitions (a model name with
// ':' among them) come back with their block sizes and blocks, so the
// recovered dump equals the peer's.
func TestRecoverFromPeerDump(t *testing.T) {
	src := start(t)
	src.worker(1, "")
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	var ev radix.Event
	ev.Worker, ev.Kind = radix.WorkerKey{WorkerID: 1}, radix.Stored
	for _, l := range radix.LocalHashes(nil, toks, 4, radix.HashSeed("", "")) {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: l + 7, Local: l})
	}
	src.svc.EventSink("m", "default").ApplyBatch([]radix.Event{ev})
	src.svc.EventSink("llama:8b", "g") // a partition with ':' and no block size: not dumped
	h := src.do("POST", "/workers", `{"worker_id":2,"model_name":"llama:8b","routing_group":"g","endpoint":"http://w2","block_size":16}`)
	src.want(h, 201)

	downURL := "http://" + refusedAddr
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 500) }))
	defer broken.Close()

	dst := start(t)
	rec, err := httpapi.Recover(context.Background(), dst.svc, []string{downURL, broken.URL, src.base}, httpapi.DefaultRecoveryConfig())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Peer != src.base || rec.Partitions != 2 || rec.Events != 1 || len(rec.Failures) != 2 || !strings.Contains(rec.Failures[1], "status 500") {
		t.Fatalf("recovered %+v", rec)
	}
	if a, b := src.svc.Dump(), dst.svc.Dump(); !reflect.DeepEqual(a, b) {
		t.Fatalf("dumps differ:\n%+v\n%+v", a, b)
	}
	if d := dst.svc.Dump(); d[0].ModelName != "llama:8b" || d[0].RoutingGroup != "g" || d[0].BlockSize != 16 {
		t.Fatalf("partition with ':' recovered as %+v", d[0])
	}

	// Every peer failing is an error; nothing is applied.
	empty := start(t)
	if _, err := httpapi.Recover(context.Background(), empty.svc, []string{downURL, broken.URL}, httpapi.DefaultRecoveryConfig()); err == nil {
		t.Fatal("recovery from failing peers succeeded")
	}
	if d := empty.svc.Dump(); len(d) != 0 {
		t.Fatalf("failed recovery applied %+v", d)
	}
}

// TestRecoverReferenceKeys: a dump without kvselect's model_name and
// routing_group fields (as the reference writes it) splits its key on the
// last ':'.
func TestRecoverReferenceKeys(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"org:model:grp":{"block_size":8,"events":[{"worker_id":3,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":5,"tokens_hash":6}]}},"dp_rank":0}}]}}`))
	}))
	defer peer.Close()
	dst := start(t)
	rec, err := httpapi.Recover(context.Background(), dst.svc, []string{peer.URL}, httpapi.DefaultRecoveryConfig())
	if err != nil || rec.Events != 1 {
		t.Fatalf("%+v %v", rec, err)
	}
	d := dst.svc.Dump()
	if len(d) != 1 || d[0].ModelName != "org:model" || d[0].RoutingGroup != "grp" || d[0].BlockSize != 8 || len(d[0].Events) != 1 {
		t.Fatalf("recovered %+v", d)
	}
}
