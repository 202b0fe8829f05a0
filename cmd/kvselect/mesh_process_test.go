package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
	"github.com/zeebo/xxh3"
)

// buildOnce builds the kvselect binary for the tests that run it as a
// separate process.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "kvselect-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kvselect")
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

// handedOut holds every port freePort returned in this test process: the
// kernel may give a closed port to the next bind to port 0, so without it
// two processes of one test can be told the same port (CI saw one selector's
// HTTP port equal another's mesh port).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a loopback port nobody listens on right now and that no
// earlier call of this test process returned.
func freePort(t *testing.T) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

// refusedAddr is a loopback address nothing listens on: port 1 is below
// the kernel's ephemeral range, so no socket of a test is ever given it.
const refusedAddr = "127.0.0.1:1"

// selector is one `kvselect serve` process.
type selector struct {
	t           *testing.T
	http, mesh  int
	args, env   []string
	cmd         *exec.Cmd
	exited      chan struct{} // closed once cmd has exited
	logs        *syncBuf
	base        string
	meshAddress string
}

func newSelector(t *testing.T, env []string, extra ...string) *selector {
	s := &selector{t: t, http: freePort(t), mesh: freePort(t), env: env}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
	s.meshAddress = fmt.Sprintf("tcp://127.0.0.1:%d", s.mesh)
	s.args = append([]string{"serve", "--host", "127.0.0.1", "--port", fmt.Sprint(s.http), "--pprof=false", "--replica-sync-port", fmt.Sprint(s.mesh)}, extra...)
	return s
}

// start runs the process and waits until /health answers. A free port can
// still be taken by another process's socket before ours binds it (the
// tests of other packages run alongside); when the HTTP port is, start
// moves to a new one and runs the process again. The replica-sync port is
// not moved: the other selectors' peer lists already name it.
func (s *selector) start() {
	s.t.Helper()
	bin, err := buildOnce()
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(s.kill)
	for attempt := 1; ; attempt++ {
		s.logs = &syncBuf{}
		s.cmd = exec.Command(bin, s.args...)
		s.cmd.Env = append(os.Environ(), s.env...)
		s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
		if err := s.cmd.Start(); err != nil {
			s.t.Fatal(err)
		}
		exited, cmd := make(chan struct{}), s.cmd
		s.exited = exited
		go func() { _ = cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(15 * time.Second)
		for {
			if healthy(s.base) {
				return
			}
			select {
			case <-exited:
			case <-time.After(10 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				s.t.Fatalf("%s: timed out waiting for /health answers\nlogs:\n%s", s.base, s.logs.String())
			}
			break
		}
		logs := s.logs.String()
		s.cmd = nil
		if attempt == 3 || !strings.Contains(logs, "serve: listen") || !strings.Contains(logs, "address already in use") {
			s.t.Fatalf("%s exited before answering /health\nlogs:\n%s", s.base, logs)
		}
		s.http = freePort(s.t)
		s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
		s.args[slices.Index(s.args, "--port")+1] = fmt.Sprint(s.http)
	}
}

// healthy reports whether base answers GET /health with 200 within a
// second.
func healthy(base string) bool {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get(base + "/health")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == 200
}

// kill stops the process at once (SIGKILL): no shutdown, no goodbye.
func (s *selector) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		s.cmd = nil
	}
}

// processClient bounds every request to a selector process, so a port
// taken by some other listener that never answers fails the request
// instead of hanging the test.
var processClient = &http.Client{Timeout: 20 * time.Second}

func (s *selector) do(method, path, body string) (string, int) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := processClient.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b), res.StatusCode
}

func (s *selector) get(path string) (string, int) { return s.do("GET", path, "") }

func (s *selector) must(method, path, body string, want int) string {
	s.t.Helper()
	got, code := s.do(method, path, body)
	if code != want {
		s.t.Fatalf("%s %s: %d %s, want %d\nlogs:\n%s", method, path, code, got, want, s.logs.String())
	}
	return got
}

func (s *selector) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: timed out waiting for %s\nlogs:\n%s", s.base, what, s.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// totals sums /loads over every rank of every partition.
func (s *selector) totals() (prefill, blocks, reqs int64) {
	s.t.Helper()
	body, code := s.get("/loads")
	if code != 200 {
		return -1, -1, -1
	}
	var parts []struct {
		Loads []struct {
			P int64 `json:"potential_prefill_tokens"`
			B int64 `json:"potential_decode_blocks"`
			N int64 `json:"active_requests"`
		} `json:"loads"`
	}
	if err := json.Unmarshal([]byte(body), &parts); err != nil {
		s.t.Fatalf("loads %s: %v", body, err)
	}
	for _, p := range parts {
		for _, l := range p.Loads {
			prefill, blocks, reqs = prefill+l.P, blocks+l.B, reqs+l.N
		}
	}
	return
}

func (s *selector) wantTotals(what string, prefill, blocks, reqs int64) {
	s.t.Helper()
	s.eventually(what, func() bool {
		p, b, n := s.totals()
		return p == prefill && b == blocks && n == reqs
	})
}

const meshWorkers = `{"worker_id":%d,"endpoint":"http://w%d","block_size":4,"data_parallel_size":2}`

func (s *selector) registerWorkers() {
	for id := 1; id <= 2; id++ {
		s.must("POST", "/workers", fmt.Sprintf(meshWorkers, id, id), 201)
	}
}

// book books id on the selector with n blocks of hashes. The block hashes
// are the id's own: without KV events a booking predicts its prompt on its
// worker (approximate index), and a repeated prompt would be booked with
// less prefill.
func (s *selector) book(id string, n int) {
	s.t.Helper()
	var bh, sh []string
	for i := range n {
		bh = append(bh, fmt.Sprint(xxh3.HashString(id)>>2+uint64(i)))
		sh = append(sh, fmt.Sprint(900*len(id)+i+1))
	}
	s.must("POST", "/select_and_reserve", fmt.Sprintf(`{"selection_id":%q,"block_hashes":[%s],"sequence_hashes":[%s],"isl_tokens":%d}`,
		id, strings.Join(bh, ","), strings.Join(sh, ","), 4*n), 200)
}

// TestMeshOfProcesses runs three `kvselect serve` processes meshed on
// loopback: bookings, completions and frees propagate to every replica and
// output blocks do not; a mirror is completed and freed on another
// replica; dynamic deregistration stops delivery and registration restores
// it; a replica killed with SIGKILL and restarted catches up with its
// peers' live bookings from their snapshots.
func TestMeshOfProcesses(t *testing.T) {
	env := []string{"DYN_USE_KV_EVENTS=false"}
	a := newSelector(t, env)
	b := newSelector(t, env)
	c := newSelector(t, env)
	a.args = append(a.args, "--replica-sync-peers", b.meshAddress+","+c.meshAddress)
	b.args = append(b.args, "--replica-sync-peers", a.meshAddress+","+c.meshAddress)
	c.args = append(c.args, "--replica-sync-peers", a.meshAddress+","+b.meshAddress)
	for _, s := range []*selector{a, b, c} {
		s.start()
		s.registerWorkers()
	}
	for _, s := range []*selector{a, b, c} {
		s.eventually("both peers connected", func() bool {
			m, _ := s.get("/metrics")
			return strings.Contains(m, "kvselect_replica_peers_connected 2") && strings.Contains(m, "kvselect_replica_subscribers 2")
		})
	}
	if got := a.must("GET", "/replica_sync/peers", "", 200); got != fmt.Sprintf("[%q,%q]", b.meshAddress, c.meshAddress) && got != fmt.Sprintf("[%q,%q]", c.meshAddress, b.meshAddress) {
		t.Fatalf("peers %s", got)
	}

	a.book("r1", 3)
	b.wantTotals("A's booking on B", 12, 3, 1)
	c.wantTotals("A's booking on C", 12, 3, 1)
	a.must("POST", "/reservations/r1/output_block", `{}`, 200)
	a.must("POST", "/reservations/r1/prefill_complete", ``, 200)
	b.wantTotals("the completion on B (without the output block)", 0, 3, 1)
	a.wantTotals("A keeps its output block", 0, 4, 1)
	c.must("DELETE", "/reservations/r1", "", 200) // a mirror freed on C
	a.wantTotals("C's free on A", 0, 0, 0)
	b.wantTotals("C's free on B", 0, 0, 0)

	// B stops listening to A, then listens again.
	b.must("POST", "/replica_sync/deregister_peer", fmt.Sprintf(`{"endpoint":%q}`, a.meshAddress), 200)
	b.must("POST", "/replica_sync/deregister_peer", fmt.Sprintf(`{"endpoint":%q}`, a.meshAddress), 404)
	a.eventually("A to lose B's subscription", func() bool {
		m, _ := a.get("/metrics")
		return strings.Contains(m, "kvselect_replica_subscribers 1")
	})
	a.book("r2", 1)
	c.wantTotals("r2 on C", 4, 1, 1)
	b.wantTotals("B without A's r2", 0, 0, 0)
	b.must("POST", "/replica_sync/register_peer", fmt.Sprintf(`{"endpoint":%q}`, a.meshAddress), 201)
	b.wantTotals("r2 on B from A's snapshot", 4, 1, 1)

	// Kill A; its own bookings die with it, B's and C's do not. The
	// restarted A starts from its peers' snapshots.
	a.must("DELETE", "/reservations/r2", "", 200)
	b.book("b1", 2)
	// C books once it sees b1: otherwise its pick may land on b1's rank,
	// where b1 and c1's shared first tracking hash counts one block.
	c.wantTotals("B's b1 on C", 8, 2, 1)
	c.book("c1", 1)
	a.wantTotals("B's and C's bookings on A", 12, 3, 2)
	a.kill()
	a.start()
	a.registerWorkers()
	p, bl, n := b.totals()
	a.wantTotals("the restarted A caught up", p, bl, n)
}

// TestRecoverFromLiveProcess: a selector process that ingests a worker's
// real ZMQ KV events serves /dump; a second process started with
// --indexer-peers recovers that index before serving, and its /dump and
// /overlap_scores equal the first's.
func TestRecoverFromLiveProcess(t *testing.T) {
	pub, err := zmqpub.New(zmqpub.Config{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	src := newSelector(t, nil)
	src.start()
	src.must("POST", "/workers", fmt.Sprintf(`{"worker_id":1,"endpoint":"http://w1","block_size":4,"kv_events_endpoint":%q}`, pub.Endpoint()), 201)
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	src.eventually("the listener connected", func() bool { return pub.Stats().Subscribers == 1 })
	pub.Publish(&zmqin.WireBatch{Timestamp: 1, Events: []zmqin.WireEvent{{Kind: radix.Stored, BlockHashes: []uint64{11, 12, 13, 14}, TokenIDs: toks, BlockSize: 4, Medium: "GPU"}}})
	query := `{"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`
	src.eventually("the blocks in the index", func() bool {
		body, _ := src.do("POST", "/overlap_scores", query)
		return strings.Contains(body, `"device_blocks":4`)
	})

	dst := newSelector(t, nil, "--indexer-peers", src.base)
	dst.start()
	if got, want := dst.must("GET", "/dump", "", 200), src.must("GET", "/dump", "", 200); got != want {
		t.Fatalf("recovered dump %s, want %s", got, want)
	}
	ready, _ := dst.get("/ready")
	if !strings.Contains(ready, fmt.Sprintf(`"recovery":{"peer":%q,"partitions":1,"events":1`, src.base)) {
		t.Fatalf("ready %s", ready)
	}
	dst.must("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4,"kv_events_endpoint":"tcp://127.0.0.1:1"}`, 201)
	if got, want := dst.must("POST", "/overlap_scores", query, 200), src.must("POST", "/overlap_scores", query, 200); got != want {
		t.Fatalf("overlap %s, want %s", got, want)
	}
}
