package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// procChildEnv marks a re-executed test binary that runs one subcommand
// ("serve ..." or "indexer ...") as its own process until stdin closes.
const procChildEnv = "KVSELECT_PROC_CHILD"

// TestProcChild is the child's entry point; in a normal run it skips.
func TestProcChild(t *testing.T) {
	spec := os.Getenv(procChildEnv)
	if spec == "" {
		t.Skip("runs only as a child process")
	}
	f := strings.Fields(spec)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	args := append([]string{"--host", "127.0.0.1", "--port", "0"}, f[1:]...)
	go func() {
		if f[0] == "indexer" {
			done <- runIndexer(ctx, args, envOf(nil), os.Stderr, ready)
		} else {
			done <- serve(ctx, args, envOf(nil), os.Stderr, ready)
		}
	}()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	select {
	case addr := <-ready:
		fmt.Printf("READY %s\n", addr)
	case code := <-done:
		fmt.Printf("EXIT %d\n", code)
		os.Exit(0)
	}
	fmt.Printf("EXIT %d\n", <-done)
	os.Exit(0)
}

// startProc runs `kvselect sub args...` in a child process and returns its
// base URL; the child stops when the test ends.
func startProc(t *testing.T, sub string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcChild$")
	cmd.Env = append(os.Environ(), procChildEnv+"="+sub+" "+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
			_ = cmd.Process.Kill()
			t.Errorf("%s child did not stop", sub)
		}
	})
	if !out.Scan() {
		t.Fatalf("%s child: no output", sub)
	}
	addr, ok := strings.CutPrefix(out.Text(), "READY ")
	if !ok {
		t.Fatalf("%s child: %s", sub, out.Text())
	}
	return "http://" + addr
}

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// waitFor polls cond (every 10 ms, at most 30 s: a hang guard).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIndexerAndRemoteSelectorProcesses: one simulated engine publishes
// real ZMQ KV events to two processes, a standalone indexer (`kvselect
// indexer --workers`) and a selector with its own listener; a third
// process, a selector with --remote-indexer-url, listens to nothing. Once
// the indexer and the local selector have applied the events (their /dump
// bodies agree), the remote selector's /overlap_scores and /select equal
// the local selector's for every prompt, and the indexer's /query agrees.
func TestIndexerAndRemoteSelectorProcesses(t *testing.T) {
	pub, err := zmqpub.New(zmqpub.Config{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ep := pub.Endpoint()
	indexer := startProc(t, "indexer", "--workers", "1="+ep, "--block-size", "4", "--model-name", "m")
	local := startProc(t, "serve")
	remote := startProc(t, "serve", "--remote-indexer-url", indexer)
	if st, body := httpDo(t, "POST", local+"/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1","block_size":4,"kv_events_endpoint":"`+ep+`"}`); st != 201 || !strings.Contains(body, "schedulable") {
		t.Fatalf("local /workers: %d %s", st, body)
	}
	if st, body := httpDo(t, "POST", remote+"/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1","block_size":4}`); st != 201 || !strings.Contains(body, `"lifecycle":"schedulable"`) {
		t.Fatalf("remote /workers (no kv_events endpoint needed): %d %s", st, body)
	}
	waitFor(t, "two subscribers", func() bool { return pub.Stats().Subscribers == 2 })

	toks := func(from, n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(from + i)
		}
		return out
	}
	stored := func(hashes []uint64, parent uint64, tokens []uint32, medium string) zmqin.WireEvent {
		return zmqin.WireEvent{Kind: radix.Stored, BlockHashes: hashes, ParentHash: parent, HasParent: parent != 0, TokenIDs: tokens, BlockSize: 4, Medium: medium}
	}
	pub.Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{
		stored([]uint64{101, 102, 103}, 0, toks(1, 12), "GPU"),
		stored([]uint64{201, 202}, 102, toks(50, 8), "GPU"),
		stored([]uint64{104}, 103, toks(13, 4), "CPU"),
	}})
	pub.Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{{Kind: radix.Removed, BlockHashes: []uint64{202}, Medium: "GPU"}}})

	var dump string
	waitFor(t, "both processes applied the events", func() bool {
		_, d1 := httpDo(t, "GET", indexer+"/dump", "")
		_, d2 := httpDo(t, "GET", local+"/dump", "")
		dump = d1
		return d1 == d2 && strings.Count(d1, `"block_hash"`) == 5 && !strings.Contains(d1, `"block_hash":202`)
	})
	prompts := [][]uint32{toks(1, 16), append(toks(1, 8), toks(50, 8)...), toks(1, 5), toks(99, 8)}
	for i, p := range prompts {
		body := `{"model_name":"m","token_ids":` + strings.ReplaceAll(fmt.Sprint(p), " ", ",") + `}`
		st1, o1 := httpDo(t, "POST", local+"/overlap_scores", body)
		st2, o2 := httpDo(t, "POST", remote+"/overlap_scores", body)
		if st1 != 200 || st1 != st2 || o1 != o2 {
			t.Fatalf("prompt %v: local %d %s, remote %d %s", p, st1, o1, st2, o2)
		}
		_, s1 := httpDo(t, "POST", local+"/select", body)
		_, s2 := httpDo(t, "POST", remote+"/select", body)
		if s1 != s2 {
			t.Fatalf("prompt %v: local select %s, remote %s", p, s1, s2)
		}
		_, q := httpDo(t, "POST", indexer+"/query", body)
		if i == 0 && q != `{"scores":{"1":{"0":12}},"frequencies":[],"instances":{"1":{"longest_matched":16,"gpu":12,"dp":{"0":12},"cpu":16,"disk":16}}}` {
			t.Fatalf("indexer /query %s (dump %s)", q, dump)
		}
	}
	// The remote selector's /dump has the partition but no primary events.
	if _, d := httpDo(t, "GET", remote+"/dump", ""); !strings.Contains(d, `"events":[]`) {
		t.Fatalf("remote selector /dump: %s", d)
	}
}

// TestRemoteIndexerFlags: --remote-indexer-url is validated with the
// reference's text, requires KV events, makes --indexer-peers ignored
// (with a warning) and excludes --demo.
func TestRemoteIndexerFlags(t *testing.T) {
	o, err := parseServe([]string{"--remote-indexer-url", "http://ix:8090/", "--indexer-peers", "http://b:8092"}, envOf(nil), io.Discard)
	if err != nil || o.remote.URL != "http://ix:8090/" || o.indexerPeers != nil || !strings.Contains(strings.Join(o.warnings, "\n"), "--indexer-peers is ignored") {
		t.Fatalf("%+v %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--remote-indexer-url", "ftp://ix"}, nil, "remote indexer URL must start with http:// or https://: ftp://ix"},
		{[]string{"--remote-indexer-url", "http://ix"}, map[string]string{"DYN_USE_KV_EVENTS": "false"}, "a remote indexer requires use_kv_events=true; the standalone indexer does not record routing decisions"},
		{[]string{"--remote-indexer-url", "http://ix", "--remote-indexer-timeout", "0s"}, nil, "must be > 0"},
		{[]string{"--remote-indexer-url", "http://ix", "--demo", "2"}, nil, "--demo needs the selector's own index"},
	} {
		if _, err := parseServe(tc.args, envOf(tc.env), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestIndexerFlags: the reference's --workers grammar and texts, and the
// required --block-size.
func TestIndexerFlags(t *testing.T) {
	o, err := parseIndexer([]string{"--workers", "1=tcp://h:5557, 2:1=tcp://h:5558", "--block-size", "16", "--peers", "http://a:8090,http://b:8090"}, envOf(map[string]string{"DYN_ROUTER_MIN_INITIAL_WORKERS": "2"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.workers) != "[{1 0 tcp://h:5557} {2 1 tcp://h:5558}]" || o.port != 8090 || o.model != "default" || len(o.peers) != 2 || o.minWorkers != 2 {
		t.Fatalf("%+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1=tcp://h:1"}, "--block-size is required when --workers is specified"},
		{[]string{"--workers", "1", "--block-size", "4"}, "invalid worker entry `1`; expected worker_id[:dp_rank]=endpoint"},
		{[]string{"--workers", "x=tcp://h:1", "--block-size", "4"}, "invalid worker id in `x=tcp://h:1`"},
		{[]string{"--workers", "1:y=tcp://h:1", "--block-size", "4"}, "invalid dp_rank in `1:y=tcp://h:1`"},
		{[]string{"--workers", "1=udp://h:1", "--block-size", "4"}, "invalid ZMQ endpoint `udp://h:1`"},
		{[]string{"--peers", "h:1"}, "--peers"},
	} {
		if _, err := parseIndexer(tc.args, envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
