package mesh

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// TestMeshInteropLibzmq: a Dynamo-style peer on libzmq (pyzmq), whose
// envelopes are msgpack dicts in Rust declaration order, and kvselect's
// mesh exchange lifecycle events both ways: the peer checks the exact bytes
// kvselect publishes for an admission, a completion and a free; kvselect
// applies the peer's admission, completion and free, and drops the peer's
// legacy tenant_id envelope, an envelope carrying kvselect's own process
// id and a message of three frames, without losing the connection.
func TestMeshInteropLibzmq(t *testing.T) {
	requireDebianPyzmq(t)
	checkNoLeak(t)
	const id = 99
	k := newReplica(t, Config{ProcessID: id})
	stdin, out := pyScript(t, "testdata/replica_peer.py", k.mesh.Endpoint(), fmt.Sprint(id))
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the script's port: %v", err)
	}
	var port int
	if _, err := fmt.Sscanf(line, "port %d", &port); err != nil {
		t.Fatalf("script said %q: %v", line, err)
	}
	ask := func(cmd string) string {
		t.Helper()
		if _, err := io.WriteString(stdin, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
		ans, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(ans)
	}

	// kvselect -> peer, byte for byte.
	waitFor(t, "the peer's subscription", func() bool { return k.mesh.Stats().Subscribers == 1 })
	eo := uint32(16)
	if _, err := k.svc.Reserve(&core.ReservationRequest{SelectionID: "go-1", WorkerID: 1, HasWorkerID: true, ExpectedOutputTokens: eo, HasExpectedOutputTokens: true,
		Prompt: core.Prompt{SequenceHashes: []uint64{11, 22}, HasSequenceHashes: true, ISLTokens: 8, HasISLTokens: true}}); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_add"); ans != "ok" {
		t.Fatalf("admission: %s", ans)
	}
	if err := k.svc.PrefillComplete("go-1"); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_prefill"); ans != "ok" {
		t.Fatalf("completion: %s", ans)
	}
	if err := k.svc.Free("go-1"); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_free"); ans != "ok" {
		t.Fatalf("free: %s", ans)
	}
	// A LoRA booking: its name is on the admission, the completion and the
	// free (the free carried none).
	if _, err := k.svc.Reserve(&core.ReservationRequest{SelectionID: "go-2", WorkerID: 2, HasWorkerID: true, DPRank: 1,
		Prompt: core.Prompt{SequenceHashes: []uint64{33}, HasSequenceHashes: true, ISLTokens: 4, HasISLTokens: true, LoraName: "my-adapter"}}); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_lora_add"); ans != "ok" {
		t.Fatalf("LoRA admission: %s", ans)
	}
	if err := k.svc.PrefillComplete("go-2"); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_lora_prefill"); ans != "ok" {
		t.Fatalf("LoRA completion: %s", ans)
	}
	if err := k.svc.Free("go-2"); err != nil {
		t.Fatal(err)
	}
	if ans := ask("expect go_lora_free"); ans != "ok" {
		t.Fatalf("LoRA free: %s", ans)
	}

	// peer -> kvselect. A libzmq PUB drops what it sends before our
	// subscription reaches it, so probe until an admission lands.
	if _, err := k.mesh.Register(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.svc.Stats().ReplicaApplied == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no probe reached kvselect")
		}
		ask("send probe")
		waitBriefly(k)
	}
	ask("send probe_free")
	wantLoads(t, k, "the probe freed", 0, 0, 0)
	connects := k.mesh.Stats().Connects
	ask("sendx py_add")
	for _, name := range []string{"legacy", "own", "py_add"} {
		ask("send " + name)
	}
	wantLoads(t, k, "the peer's admission", 12, 3, 1)
	ask("send py_prefill")
	wantLoads(t, k, "the peer's completion", 0, 3, 1)
	ask("send py_free")
	wantLoads(t, k, "the peer's free", 0, 0, 0)
	st := k.mesh.Stats()
	if st.Dropped[DropLegacy] != 1 || st.Dropped[DropOwn] != 1 || st.Dropped[DropUndecodable] != 0 || st.Dropped[DropExtraFrames] != 1 {
		t.Fatalf("drops %v", st.Dropped)
	}
	if st.Connects != connects || st.Disconnects != 0 {
		t.Fatalf("connects %d (was %d), disconnects %d", st.Connects, connects, st.Disconnects)
	}
}

// waitBriefly gives a probe a moment to arrive before the next one: it
// returns as soon as the service applied an event, or after 20 ms.
func waitBriefly(r *replica) {
	for range 10 {
		if r.svc.Stats().ReplicaApplied > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
