package zmqpub

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

func newPublisher(t testing.TB, cfg Config) *Publisher {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkNoLeak fails the test if goroutines started during it are still
// running after cleanup; register it first so it runs last.
func checkNoLeak(t testing.TB) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base, buf[:n])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestPublisherHWM: a subscriber that stops reading loses messages at its
// high-water mark, counted, while the Publisher never blocks.
func TestPublisherHWM(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, Config{HWM: 8})
	zc, err := zmtp.Dial(context.Background(), p.Endpoint(), zmtp.Sub, zmtp.Limits{MaxFrames: 3, MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if err := zc.Send([]byte{1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscribed", func() bool { return p.Stats().Subscribers == 1 })
	payload := make([]byte, 64<<10)
	for range 200 { // ~13 MB: more than the socket buffers hold
		p.PublishPayload(payload)
	}
	waitFor(t, "drops", func() bool { return p.Stats().Dropped > 0 })
	if st := p.Stats(); st.Published != 200 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{}, {Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "x"}, {Endpoint: "tcp://127.0.0.1:0", HWM: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// debianPython is Debian's interpreter, which python3-zmq and python3-msgpack
// install into (the python3 on PATH may be another one).
const debianPython = "/usr/bin/python3"

// requireDebianPyzmq skips the test, loudly, when Debian's python cannot
// import zmq and msgpack; under CI (CI=true, where .ci/run installs them) it
// fails instead, so the interoperability test never passes silently.
func requireDebianPyzmq(t *testing.T) {
	t.Helper()
	out, err := exec.Command(debianPython, "-c", "import zmq, msgpack").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("libzmq interop test needs %s with python3-zmq and python3-msgpack "+
		"(apt-get install -y python3-zmq python3-msgpack): %v: %s", debianPython, err, strings.TrimSpace(string(out)))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

// TestInteropLibzmqSubscriber: a libzmq SUB (pyzmq, like vLLM's example
// subscriber) reads our Publisher, and a libzmq DEALER replays from our
// ROUTER: what the mocker publishes is readable by libzmq consumers.
func TestInteropLibzmqSubscriber(t *testing.T) {
	requireDebianPyzmq(t)
	checkNoLeak(t)
	p := newPublisher(t, Config{ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv-events", Encoder: zmqin.Encoder{Encoding: zmqin.EncodingMap}})
	cmd := exec.Command(debianPython, "../testdata/vllm_sub.py", p.Endpoint(), p.ReplayEndpoint(), "3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "subscribed\n" {
		t.Fatalf("script: %q %v", line, err)
	}
	waitFor(t, "subscribed", func() bool { return p.Stats().Subscribers == 1 })
	toks := []uint32{1, 2, 3, 4}
	p.Publish(&zmqin.WireBatch{Timestamp: 1.5, Events: []zmqin.WireEvent{{
		Kind: radix.Stored, BlockHashes: []uint64{1}, TokenIDs: toks, BlockSize: 4, Medium: "GPU", SpecKind: "full_attention",
	}}})
	p.Publish(&zmqin.WireBatch{Timestamp: 2.5, Events: []zmqin.WireEvent{{Kind: radix.Removed, BlockHashes: []uint64{1}, Medium: "GPU"}}})
	p.Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{{Kind: radix.Cleared}}})
	var out []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		out = append(out, strings.TrimSpace(line))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v (output %q)", err, out)
	}
	want := []string{"live 0 BlockStored 1", "live 1 BlockRemoved 1", "live 2 AllBlocksCleared 1", "replay 1", "replay 2", "end"}
	if strings.Join(out, "|") != strings.Join(want, "|") {
		t.Fatalf("script output %q, want %q", out, want)
	}
}
