package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// TestEppKubernetesProcess runs `kvselect epp` as it runs in a cluster:
// the workers are the Ready pods of an InferencePool, read through
// client-go from an API server (kubetest's protocol-level fake, over TLS,
// named by --kubeconfig: no kube-apiserver runs on this machine). Each
// pod's KV events are read from its IP and --kv-events-port; a prompt a
// pod has cached is picked there; a pod that goes unready is removed
// with no restart, and its KV listener with it.
func TestEppKubernetesProcess(t *testing.T) {
	api := kubetest.NewAPI(t)
	const ns = "inference"
	kvPort := freePort(t)
	pubs := make([]*zmqpub.Publisher, 2)
	for i := range pubs {
		// Each pod on an address of its own (127.0.0.0/8 is loopback).
		p, err := zmqpub.New(zmqpub.Config{Endpoint: fmt.Sprintf("tcp://127.0.0.%d:%d", i+2, kvPort)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pubs[i] = p
	}
	api.Put("inferencepools", kubetest.PoolObj(ns, "llama", map[string]string{"app": "vllm"}, 8000))
	for i := range pubs {
		api.Put("pods", kubetest.PodObj(ns, fmt.Sprintf("vllm-%d", i), fmt.Sprintf("uid-%d", i), fmt.Sprintf("127.0.0.%d", i+2), true, map[string]string{"app": "vllm"}))
	}
	api.Put("pods", kubetest.PodObj(ns, "other", "uid-x", "127.0.0.9", true, map[string]string{"app": "web"}))
	p := startEppProc(t, "--kubeconfig", api.Kubeconfig(t, ns), "--pool-name", "llama", "--model-name", "m", "--block-size", "4", "--kv-events-port", fmt.Sprint(kvPort))
	waitFor(t, "the pool's two Ready pods as workers", func() bool {
		w, _ := p.get("/workers")
		return strings.Contains(w, `"endpoint":"http://127.0.0.2:8000"`) && strings.Contains(w, `"endpoint":"http://127.0.0.3:8000"`) && !strings.Contains(w, "127.0.0.9")
	})
	waitFor(t, "each pod's KV events subscribed", func() bool {
		return pubs[0].Stats().Subscribers == 1 && pubs[1].Stats().Subscribers == 1
	})
	// Pod 1 stores the prompt's blocks: the pick goes to it.
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	pubs[1].Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{{Kind: radix.Stored, BlockHashes: []uint64{1, 2, 3}, TokenIDs: ids, BlockSize: 4, Medium: "GPU"}}})
	body := `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13]}`
	waitFor(t, "the cached pod picked", func() bool {
		dest, _, cancel := eppPick(t, p.client(), body)
		cancel()
		return dest == "127.0.0.3:8000"
	})
	// Pod 1 goes unready: removed, its listener closed, picks go to pod 0.
	api.Put("pods", kubetest.PodObj(ns, "vllm-1", "uid-1", "127.0.0.3", false, map[string]string{"app": "vllm"}))
	waitFor(t, "the unready pod removed", func() bool {
		w, _ := p.get("/workers")
		return !strings.Contains(w, "127.0.0.3") && strings.Contains(w, "127.0.0.2")
	})
	waitFor(t, "its KV listener closed", func() bool { return pubs[1].Stats().Subscribers == 0 })
	if dest, _, cancel := eppPick(t, p.client(), body); dest != "127.0.0.2:8000" {
		t.Fatalf("after the pod left: picked %s", dest)
	} else {
		cancel()
	}
	if m, _ := p.get("/metrics"); !strings.Contains(m, "kvselect_kube_") {
		t.Fatalf("no discovery metrics:\n%.2000s", m)
	}
}
