package httpapi_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
)

// ixHarness is a standalone indexer on a loopback port (no listener
// connects: NopIngress), fed through Restore.
type ixHarness struct {
	t    *testing.T
	base string
	ix   *core.Indexer
	srv  *httpapi.Server
}

// startIndexer starts an indexer with the default configurations, as opts
// change them.
func startIndexer(t *testing.T, opts ...func(*core.IndexerConfig, *httpapi.Config)) *ixHarness {
	t.Helper()
	cfg, hcfg := core.DefaultIndexerConfig(), httpapi.DefaultConfig()
	for _, o := range opts {
		o(&cfg, &hcfg)
	}
	ix, err := core.NewIndexer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.NewIndexer(ix, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &ixHarness{t: t, base: serveLoopback(t, srv), ix: ix, srv: srv}
}

// call sends a request (JSON content type unless ct is given) and returns
// status, content type and body.
func (h *ixHarness) call(method, path, body string, ct ...string) (int, string, string) {
	h.t.Helper()
	status, ctype, b := send(h.t, h.base, method, path, body, ct...)
	return status, ctype, string(b)
}

func (h *ixHarness) want(method, path, body string, status int, wantBody string, ct ...string) {
	h.t.Helper()
	st, _, got := h.call(method, path, body, ct...)
	if st != status || got != wantBody {
		h.t.Fatalf("%s %s %s: %d %q, want %d %q", method, path, body, st, got, status, wantBody)
	}
}

// TestIndexerRoutes: the standalone indexer's routes answer with the
// reference's statuses and bodies, JSON errors from handlers and plain
// text from body extraction.
func TestIndexerRoutes(t *testing.T) {
	h := startIndexer(t)
	ok := `{"status":"ok"}`
	h.want("POST", "/register", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:5557","model_name":"m","block_size":4,"tenant_id":"legacy","additionalsalt":"s"}`, 201, ok)
	h.want("POST", "/register", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:5558","model_name":"m","block_size":4,"dp_rank":1}`, 201, ok)
	h.want("POST", "/register", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:5558","model_name":"m","block_size":4,"dp_rank":1}`, 409, `{"error":"instance 1 dp_rank 1 already registered"}`)
	h.want("POST", "/register", `{"instance_id":2,"endpoint":"tcp://127.0.0.1:5559","model_name":"m","block_size":8}`, 409, `{"error":"block_size mismatch for model=m routing_group=default: existing=4, requested=8"}`)
	h.want("POST", "/register", `{"instance_id":2,"endpoint":"nonsense","model_name":"m","block_size":4}`, 400, `{"error":"invalid ZMQ endpoint `+"`nonsense`"+`: missing transport (expected tcp:// or ipc://)"}`)
	h.want("POST", "/register", `{"instance_id":2,"endpoint":"tcp://127.0.0.1:5559","block_size":4}`, 422, "Failed to deserialize the JSON body into the target type: missing field `model_name` at line 1 column 66")
	h.want("POST", "/register", `{"instance_id":2,`, 400, "Failed to parse the request body as JSON: EOF while parsing an object at line 1 column 17")
	h.want("POST", "/register", `{}`, 415, "Expected request with `Content-Type: application/json`", "text/plain")
	h.want("POST", "/register", `{"instance_id":"2"}`, 422, "Failed to deserialize the JSON body into the target type: instance_id: invalid type: string, expected u64 at line 1 column 18")
	if st, ct, _ := h.call("POST", "/register", `{`); st != 400 || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("body errors are plain text: %d %s", st, ct)
	}
	big := `{"instance_id":2,"endpoint":"` + strings.Repeat("x", 2<<20) + `"}`
	h.want("POST", "/register", big, 413, "Failed to buffer the request body: length limit exceeded")

	_, ct, workers := h.call("GET", "/workers?model_name=m", "")
	if !strings.HasPrefix(ct, "application/json") || !strings.Contains(workers, `"instance_id":1,"source":"zmq","status":"pending","model_name":"m","routing_group":"default","block_size":4,"endpoints":{"0":"tcp://127.0.0.1:5557","1":"tcp://127.0.0.1:5558"}`) {
		t.Fatalf("workers: %s", workers)
	}
	h.want("GET", "/workers?model_name=x", "", 200, `[]`)

	local := restoreBlocks(t, h)
	scores := `{"scores":{"1":{"0":8,"1":4}},"frequencies":[],"instances":{"1":{"longest_matched":12,"gpu":8,"dp":{"0":8,"1":4},"cpu":12,"disk":12}}}`
	h.want("POST", "/query", `{"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13],"model_name":"m"}`, 200, scores)
	h.want("POST", "/query", `{"token_ids":[1,2,3,4],"model_name":"m","cache_salt":"t"}`, 200, `{"scores":{},"frequencies":[],"instances":{}}`)
	hashes := `[` + i64(local[0]) + `,` + i64(local[1]) + `,` + i64(local[2]) + `]`
	h.want("POST", "/query_by_hash", `{"block_hashes":`+hashes+`,"model_name":"m"}`, 200, scores)
	h.want("POST", "/query_by_hash", `{"block_hashes":[1],"model_name":"m","cache_salt":"x"}`, 400, `{"error":"cache_salt is not accepted by /query_by_hash; block_hashes must already include the intended cache salt"}`)
	h.want("POST", "/query_by_hash", `{"block_hashes":[1],"model_name":"m","cache_salt":null}`, 200, `{"scores":{},"frequencies":[],"instances":{}}`)
	h.want("POST", "/query_by_hash", `{"block_hashes":[1],"model_name":"x"}`, 404, `{"error":"no indexer for model=x routing_group=default"}`)
	h.want("POST", "/query", `{"model_name":"m"}`, 422, "Failed to deserialize the JSON body into the target type: missing field `token_ids` at line 1 column 18")
	h.want("POST", "/query_tiered_by_hash", `{"block_hashes":`+hashes+`,"model_name":"m","routing_group":"default"}`, 200,
		`{"block_size":4,"tiered":{"device":{"scores":[[{"worker_id":1,"dp_rank":0},2],[{"worker_id":1,"dp_rank":1},1]],"frequencies":[]},"lower_tier":[["host_pinned",{"hits":[[{"worker_id":1,"dp_rank":0},1]]}]]}}`)
	h.want("POST", "/query_tiered_by_hash", `{"block_hashes":[1],"model_name":"m","cache_salt":"x"}`, 400, `{"error":"cache_salt is not accepted by /query_tiered_by_hash; block_hashes must already include the intended cache salt"}`)

	// /dump carries what was applied, in the selector's format.
	_, _, dump := h.call("GET", "/dump", "")
	if !strings.HasPrefix(dump, `{"m:default":{"block_size":4,"events":[{"worker_id":1,"storage_tier":"device","residency_domain":"worker","event":{"event_id":0,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":100,`) ||
		!strings.Contains(dump, `"storage_tier":"host_pinned"`) || !strings.HasSuffix(dump, `"model_name":"m","routing_group":"default"}}`) {
		t.Fatalf("dump: %s", dump)
	}

	// Peers.
	h.want("POST", "/register_peer", `{"url":"http://b:8090"}`, 201, ok)
	h.want("POST", "/register_peer", `{"url":"http://a:8090"}`, 201, ok)
	h.want("GET", "/peers", "", 200, `["http://a:8090","http://b:8090"]`)
	h.want("POST", "/deregister_peer", `{"url":"http://c:8090"}`, 404, `{"error":"peer not found"}`)
	h.want("POST", "/deregister_peer", `{"url":"http://a:8090"}`, 200, ok)

	// Unregistration.
	h.want("POST", "/unregister", `{"instance_id":1,"model_name":"m","routing_group":"default","dp_rank":5}`, 404, `{"error":"instance 1 dp_rank 5 not found"}`)
	h.want("POST", "/unregister", `{"instance_id":1,"model_name":"n"}`, 404, `{"error":"instance 1 is registered for model=m routing_group=default"}`)
	h.want("POST", "/unregister", `{"instance_id":3,"model_name":"m"}`, 404, `{"error":"instance 3 not found"}`)
	h.want("POST", "/unregister", `{"instance_id":1,"model_name":"m","routing_group":"default","dp_rank":1}`, 200, ok)
	h.want("POST", "/query", `{"token_ids":[1,2,3,4],"model_name":"m"}`, 200, `{"scores":{"1":{"0":4}},"frequencies":[],"instances":{"1":{"longest_matched":4,"gpu":4,"dp":{"0":4},"cpu":4,"disk":4}}}`)
	h.want("POST", "/unregister", `{"instance_id":1,"model_name":"m"}`, 200, ok)
	h.want("POST", "/query", `{"token_ids":[1,2,3,4],"model_name":"m"}`, 404, `{"error":"no indexer for model=m routing_group=default"}`)

	// Fallbacks and plain routes.
	h.want("GET", "/health", "", 200, "")
	h.want("GET", "/nope", "", 404, "")
	h.want("GET", "/register", "", 405, "")
	h.want("POST", "/dump", "{}", 405, "")
	h.want("POST", "/reopen_logs", "", 200, ok)
	_, _, metrics := h.call("GET", "/metrics", "")
	for _, m := range []string{`kvselect_indexer_workers 0`, `kvselect_indexer_peers 1`, `kvselect_http_requests_total{route="POST /query",code="200"}`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %q", m)
		}
	}
}

func i64(v uint64) string { return strconv.FormatInt(int64(v), 10) }

// restoreBlocks gives worker 1 of partition m:default (block size 4) two
// device blocks on rank 0 with a host-pinned continuation, and one device
// block on rank 1, for tokens 1..12; it returns the three blocks' local
// hashes.
func restoreBlocks(t *testing.T, h *ixHarness) []uint64 {
	t.Helper()
	local := radix.LocalHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4, radix.HashSeed("", ""))
	evs := []core.Event{
		{Worker: core.WorkerKey{WorkerID: 1}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 100, Local: local[0]}, {Hash: 101, Local: local[1]}}},
		{Worker: core.WorkerKey{WorkerID: 1, DPRank: 1}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 200, Local: local[0]}}},
		{Worker: core.WorkerKey{WorkerID: 1}, Kind: radix.Stored, Tier: radix.TierHostPinned, HasParent: true, ParentHash: 101, Blocks: []radix.Block{{Hash: 102, Local: local[2]}}},
	}
	if n, err := h.ix.Restore("m", "default", 4, evs); err != nil || n != 3 {
		t.Fatalf("restore %d %v", n, err)
	}
	return local
}
