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
