package zmqpub

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/internal/zmqtest"
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

// The waits and the libzmq harness of zmqin/internal/zmqtest, under this
// package's names.
var (
	waitFor     = zmqtest.WaitFor
	checkNoLeak = zmqtest.CheckNoLeak
)

// debianPython is Debian's interpreter, which python3-zmq and python3-msgpack
// install into (the python3 on PATH may be another one).
const debianPython = zmqtest.DebianPython

// requireDebianPyzmq skips a libzmq interop test without Debian's pyzmq,
// and fails it instead under CI (CI=true).
func requireDebianPyzmq(t *testing.T) { zmqtest.RequireDebianPyzmq(t, os.Getenv("CI") == "true") }

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
