package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// pprofURL is the URL a process logged for its debug listener.
var pprofURL = regexp.MustCompile(`serving /debug/pprof.* url=(\S+)`)

// debugURLOf waits for s's "serving /debug/pprof" line and returns its
// URL.
func debugURLOf(s *selector) string {
	s.t.Helper()
	var url string
	s.eventually("the debug listener's log line", func() bool {
		m := pprofURL.FindStringSubmatch(s.logs.String())
		if m == nil {
			return false
		}
		url = m[1]
		return true
	})
	return url
}

// TestDefaultFlagsOnOneHost starts two meshed selectors and an indexer on
// one host exactly as a user first tries them, with no flag but the
// ports: none dies on a default address another one holds (the debug
// listener's fixed 127.0.0.1:6060 did), each serves its own profiles, and
// the two selectors' mesh carries a booking.
func TestDefaultFlagsOnOneHost(t *testing.T) {
	a := &selector{t: t, http: freePort(t), mesh: freePort(t)}
	b := &selector{t: t, http: freePort(t), mesh: freePort(t)}
	ix := &selector{t: t, http: freePort(t)}
	for _, s := range []*selector{a, b, ix} {
		s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
		s.meshAddress = fmt.Sprintf("tcp://127.0.0.1:%d", s.mesh)
	}
	a.args = []string{"serve", "--port", fmt.Sprint(a.http), "--replica-sync-port", fmt.Sprint(a.mesh), "--replica-sync-peers", b.meshAddress}
	b.args = []string{"serve", "--port", fmt.Sprint(b.http), "--replica-sync-port", fmt.Sprint(b.mesh), "--replica-sync-peers", a.meshAddress}
	ix.args = []string{"indexer", "--port", fmt.Sprint(ix.http)}
	ix2 := &selector{t: t, http: freePort(t)}
	ix2.base = fmt.Sprintf("http://127.0.0.1:%d", ix2.http)
	ix2.args = []string{"indexer", "--port", fmt.Sprint(ix2.http)}
	for _, s := range []*selector{a, b, ix, ix2} {
		s.start()
	}

	// Every process serves profiles, each on an address of its own; the
	// ones that found their default taken said so, naming the flag.
	seen := map[string]bool{}
	for _, s := range []*selector{a, b, ix, ix2} {
		u := debugURLOf(s)
		if seen[u] {
			t.Fatalf("two processes report the debug listener %s", u)
		}
		seen[u] = true
		res, err := http.Get(strings.TrimSuffix(u, "/") + "/cmdline")
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s/cmdline: %d", u, res.StatusCode)
		}
	}
	for _, s := range []*selector{b, ix2} {
		if l := s.logs.String(); !strings.Contains(l, "default debug address is taken") || !strings.Contains(l, "--debug-addr") {
			t.Fatalf("%s: no warning about its taken debug address:\n%s", s.base, l)
		}
	}

	// The mesh carries a booking from A to B.
	for _, s := range []*selector{a, b} {
		s.eventually("the peer connected", func() bool {
			m, _ := s.get("/metrics")
			return strings.Contains(m, "kvselect_replica_peers_connected 1") && strings.Contains(m, "kvselect_replica_subscribers 1")
		})
		s.must("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4,"kv_events_endpoint":"`+"tcp://"+refusedAddr+`"}`, 201)
	}
	a.book("one-host", 2)
	b.wantTotals("A's booking on B", 8, 2, 1)
	ix.must("GET", "/workers", "", 200)
}

// TestExplicitDebugAddrTaken: a --debug-addr the user gave that cannot be
// bound is fatal (exit 1, the flag named), for serve and the indexer; the
// default one is not (TestDefaultFlagsOnOneHost).
func TestExplicitDebugAddrTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for name, run := range map[string]host{"serve": serve, "indexer": runIndexer} {
		var logs syncBuf
		code := run(context.Background(), []string{"--host", "127.0.0.1", "--port", "0", "--debug-addr", ln.Addr().String()}, envOf(nil), &logs, nil)
		if code != 1 || !strings.Contains(logs.String(), "--debug-addr") || !strings.Contains(logs.String(), "address already in use") {
			t.Fatalf("%s: exit %d, want 1 naming --debug-addr:\n%s", name, code, logs.String())
		}
	}
}

// TestTwoMockersAndServeDefaults: two `kvselect mocker` processes with
// default flags run side by side (the fixed base port 5557 made the second
// one fail, and clashed with a vLLM engine's default), and a default
// `serve` ingests both from the descriptions they print.
func TestTwoMockersAndServeDefaults(t *testing.T) {
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	var bodies []map[string]any
	for i := range 2 {
		cmd := exec.Command(bin, "mocker")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuf{}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var w map[string]any
		if err := json.NewDecoder(out).Decode(&w); err != nil {
			t.Fatalf("mocker %d printed no description: %v\n%s", i, err, logs.String())
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
		w["worker_id"] = i + 1
		bodies = append(bodies, w)
	}
	if fmt.Sprint(bodies[0]["kv_events_endpoints"]) == fmt.Sprint(bodies[1]["kv_events_endpoints"]) {
		t.Fatalf("both mockers publish on %v", bodies[0]["kv_events_endpoints"])
	}
	s := &selector{t: t, http: freePort(t)}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
	s.args = []string{"serve", "--port", fmt.Sprint(s.http)}
	s.start()
	for _, b := range bodies {
		body, _ := json.Marshal(b)
		s.must("POST", "/workers", string(body), 201)
	}
	s.eventually("events from both mockers", func() bool {
		m, _ := s.get("/metrics")
		return strings.Contains(m, "kvselect_kv_listeners_connected 2")
	})
}

// TestIndexerAccessLogProcess: `kvselect indexer --access-log FILE` writes
// a line per request and flushes it when stopped by SIGTERM.
func TestIndexerAccessLogProcess(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "access.log")
	ix := &selector{t: t, http: freePort(t)}
	ix.base = fmt.Sprintf("http://127.0.0.1:%d", ix.http)
	ix.args = []string{"indexer", "--port", fmt.Sprint(ix.http), "--access-log", logPath, "--trace-id-header", "x-request-id"}
	ix.start()
	req, _ := http.NewRequest("GET", ix.base+"/workers", nil)
	req.Header.Set("X-Request-Id", "abc")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_ = ix.cmd.Process.Signal(syscall.SIGTERM)
	<-ix.exited
	ix.cmd = nil
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"trace_id":"abc","method":"GET","path":"/workers","model":"-","status":200`) {
		t.Fatalf("access log %q\nlogs:\n%s", b, ix.logs.String())
	}
}

// TestIndexerTestEndpoints: with DYN_KV_INDEXER_TEST_ENDPOINTS=true the
// indexer serves the reference's listener-control test routes with its
// statuses and texts; without it they are unknown routes.
func TestIndexerTestEndpoints(t *testing.T) {
	pub, err := zmqpub.New(zmqpub.Config{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	off := &selector{t: t, http: freePort(t)}
	off.base = fmt.Sprintf("http://127.0.0.1:%d", off.http)
	off.args = []string{"indexer", "--port", fmt.Sprint(off.http)}
	off.start()
	if body, code := off.do("POST", "/test/pause_listener", `{"instance_id":1}`); code != 404 || body != "" {
		t.Fatalf("without the variable: %d %q", code, body)
	}

	ix := &selector{t: t, http: freePort(t), env: []string{"DYN_KV_INDEXER_TEST_ENDPOINTS=true"}}
	ix.base = fmt.Sprintf("http://127.0.0.1:%d", ix.http)
	ix.args = []string{"indexer", "--port", fmt.Sprint(ix.http)}
	ix.start()
	if !strings.Contains(ix.logs.String(), "must never be enabled in production") {
		t.Fatalf("no warning:\n%s", ix.logs.String())
	}
	ix.must("POST", "/register", fmt.Sprintf(`{"instance_id":1,"endpoint":%q,"model_name":"m","block_size":4}`, pub.Endpoint()), 201)
	ix.eventually("the listener connected", func() bool { return pub.Stats().Subscribers == 1 })
	for _, c := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/test/pause_listener", `{"instance_id":1}`, 200, `{"status":"ok"}`},
		{"/test/pause_listener", `{"instance_id":1,"dp_rank":0}`, 409, `{"error":"instance 1 dp_rank 0 cannot be paused from status paused"}`},
		{"/test/pause_listener", `{"instance_id":9}`, 404, `{"error":"instance 9 not found"}`},
		{"/test/resume_listener", `{"instance_id":1,"dp_rank":3}`, 404, `{"error":"instance 1 dp_rank 3 not found"}`},
		{"/test/resume_listener", `{"instance_id":1}`, 200, `{"status":"ok"}`},
	} {
		if body, code := ix.do("POST", c.path, c.body); code != c.code || body != c.want {
			t.Fatalf("%s %s: %d %s, want %d %s", c.path, c.body, code, body, c.code, c.want)
		}
		if c.path == "/test/pause_listener" && c.code == 200 {
			if w := ix.must("GET", "/workers", "", 200); !strings.Contains(w, `"status":"paused"`) {
				t.Fatalf("workers while paused: %s", w)
			}
		}
	}
	ix.eventually("the listener reconnected", func() bool { return pub.Stats().Subscribers == 1 })
	ix.eventually("active again", func() bool {
		w, _ := ix.get("/workers")
		return strings.Contains(w, `"status":"active"`)
	})
	if body, code := ix.do("POST", "/test/resume_listener", `{"instance_id":1}`); code != 409 || body != `{"error":"instance 1 dp_rank 0 cannot be resumed from status active"}` {
		t.Fatalf("resume of an active listener: %d %s", code, body)
	}
}
