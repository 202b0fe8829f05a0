package kube

import (
	"errors"
	"flag"
	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
	"io"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestWorkerID: the id is a function of the UID alone, within 53 bits,
// and differs between UIDs (a recreated pod is a new worker).
func TestWorkerID(t *testing.T) {
	seen := map[uint64]string{}
	for _, uid := range []string{"", "a", "b", "0b7d1d9e-6a3c-4c1e-9c55-3f9a7e0d2c11", "0b7d1d9e-6a3c-4c1e-9c55-3f9a7e0d2c12"} {
		id := WorkerID(uid)
		if id == 0 || id >= 1<<53 || id != WorkerID(uid) {
			t.Errorf("WorkerID(%q) = %d: want a stable id in [1, 2^53)", uid, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("WorkerID(%q) = WorkerID(%q)", uid, prev)
		}
		seen[id] = uid
	}
	// Pinned: a change of the rule changes every worker id of a fleet.
	if got := WorkerID("0b7d1d9e-6a3c-4c1e-9c55-3f9a7e0d2c11"); got != pinnedID {
		t.Errorf("WorkerID changed: %d, was %d", got, pinnedID)
	}
}

// pinnedID is WorkerID("0b7d1d9e-6a3c-4c1e-9c55-3f9a7e0d2c11").
const pinnedID = 1392312825917448

func testPod(mut func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-0", Namespace: "llm", UID: types.UID("u0"), Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{PodIP: "10.1.2.3", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

// TestWorkerFor: which pods are workers, and their records.
func TestWorkerFor(t *testing.T) {
	pool := &unstructured.Unstructured{Object: kubetest.PoolObj("llm", "p", map[string]string{"app": "vllm"}, 8000)}
	tg, err := parsePool(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.BlockSize, c.ModelName, c.DataParallelSize, c.KVEventsPortStride = 32, "m", 3, 10
	for _, tc := range []struct {
		name string
		mut  func(*corev1.Pod)
		ok   bool
	}{
		{"ready", nil, true},
		{"unready", func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionFalse }, false},
		{"no ready condition", func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }, false},
		{"terminating", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, false},
		{"no IP", func(p *corev1.Pod) { p.Status.PodIP = "" }, false},
		{"bad IP", func(p *corev1.Pod) { p.Status.PodIP = "10.1.2" }, false},
		{"no UID", func(p *corev1.Pod) { p.UID = "" }, false},
		{"unselected", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} }, false},
		{"no labels", func(p *corev1.Pod) { p.Labels = nil }, false},
	} {
		sp, ok := c.workerFor(testPod(tc.mut), &tg)
		if ok != tc.ok {
			t.Errorf("%s: worker %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		if sp.WorkerID != WorkerID("u0") || *sp.Endpoint != "http://10.1.2.3:8000" || sp.ModelName != "m" || sp.RoutingGroup != "" ||
			*sp.BlockSize != 32 || *sp.DataParallelSize != 3 || sp.ReplayEndpoint != nil || sp.TotalKVBlocks != nil ||
			!maps.Equal(sp.KVEventsEndpoints, map[uint32]string{0: "tcp://10.1.2.3:5557", 1: "tcp://10.1.2.3:5567", 2: "tcp://10.1.2.3:5577"}) {
			t.Errorf("%s: %+v", tc.name, sp)
		}
	}
	if _, ok := c.workerFor(testPod(nil), nil); ok {
		t.Error("a worker without a target")
	}
}

// TestParsePool: the pool forms kvselect reads and the ones it refuses.
func TestParsePool(t *testing.T) {
	obj := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	}
	sel := map[string]any{"matchLabels": map[string]any{"app": "vllm"}}
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		port  int
		extra int
		err   string
	}{
		{"v1", map[string]any{"selector": sel, "targetPorts": []any{map[string]any{"number": int64(8000)}}}, 8000, 0, ""},
		{"three ports", map[string]any{"selector": sel, "targetPorts": []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}, map[string]any{"number": int64(8002)}}}, 8000, 2, ""},
		{"v1alpha2 targetPortNumber", map[string]any{"selector": sel, "targetPortNumber": int64(8080)}, 8080, 0, ""},
		{"no selector", map[string]any{"targetPorts": []any{map[string]any{"number": int64(8000)}}}, 0, 0, "matchLabels"},
		{"empty selector", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{}}, "targetPorts": []any{map[string]any{"number": int64(8000)}}}, 0, 0, "matchLabels"},
		{"bad label", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "a b"}}, "targetPorts": []any{map[string]any{"number": int64(8000)}}}, 0, 0, "matchLabels"},
		{"no ports", map[string]any{"selector": sel}, 0, 0, "targetPorts"},
		{"empty ports", map[string]any{"selector": sel, "targetPorts": []any{}}, 0, 0, "targetPorts"},
		{"port without number", map[string]any{"selector": sel, "targetPorts": []any{map[string]any{}}}, 0, 0, "number"},
		{"port out of range", map[string]any{"selector": sel, "targetPorts": []any{map[string]any{"number": int64(70000)}}}, 0, 0, "outside"},
		{"port not an object", map[string]any{"selector": sel, "targetPorts": []any{int64(8000)}}, 0, 0, "not an object"},
	} {
		tg, err := parsePool(obj(tc.spec))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !errors.Is(err, errPoolInvalid) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		case tc.err == "" && (tg.port != tc.port || tg.extraPorts != tc.extra || tg.selector.String() != "app=vllm"):
			t.Errorf("%s: %+v", tc.name, tg)
		}
	}
}

// TestConfigValidate: every rule of Validate.
func TestConfigValidate(t *testing.T) {
	ok := func() Config { c := DefaultConfig(); c.PoolName, c.BlockSize = "p", 16; return c }
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		bad  bool
	}{
		{"pool", func(*Config) {}, false},
		{"selector", func(c *Config) { c.PoolName, c.Selector, c.TargetPorts = "", "app=x", []int{8000} }, false},
		{"neither", func(c *Config) { c.PoolName = "" }, true},
		{"both", func(c *Config) { c.Selector, c.TargetPorts = "app=x", []int{8000} }, true},
		{"bad selector", func(c *Config) { c.PoolName, c.Selector, c.TargetPorts = "", "app in (", []int{8000} }, true},
		{"selector without port", func(c *Config) { c.PoolName, c.Selector = "", "app=x" }, true},
		{"nine ports", func(c *Config) { c.PoolName, c.Selector, c.TargetPorts = "", "app=x", []int{1, 2, 3, 4, 5, 6, 7, 8, 9} }, true},
		{"port 0", func(c *Config) { c.PoolName, c.Selector, c.TargetPorts = "", "app=x", []int{0} }, true},
		{"ports with a pool", func(c *Config) { c.TargetPorts = []int{8000} }, true},
		{"dp 0", func(c *Config) { c.DataParallelSize = 0 }, true},
		{"dp too large", func(c *Config) { c.DataParallelSize = 1025 }, true},
		{"stride 0", func(c *Config) { c.KVEventsPortStride = 0 }, true},
		{"last rank port", func(c *Config) { c.KVEventsPort, c.DataParallelSize = 65535, 2 }, true},
		{"no KV port with dp", func(c *Config) { c.KVEventsPort, c.DataParallelSize = 0, 4 }, false},
		{"replay with dp", func(c *Config) { c.ReplayPort, c.DataParallelSize = 5558, 2 }, true},
		{"replay port range", func(c *Config) { c.ReplayPort = 65536 }, true},
		{"no block size", func(c *Config) { c.BlockSize = 0 }, true},
		{"negative debounce", func(c *Config) { c.Debounce = -1 }, true},
	} {
		c := ok()
		tc.mut(&c)
		err := c.Validate()
		if (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: %v, want bad=%v", tc.name, err, tc.bad)
		}
	}
}

// TestRegisterFlags: defaults from the environment, flags over them, on a
// real flag.FlagSet.
func TestRegisterFlags(t *testing.T) {
	envs := map[string]string{
		"KUBECONFIG": "/k", "DYN_EPP_INFERENCE_POOL_NAME": "pool-a", "POD_NAMESPACE": "ns-pod",
		"DYN_EPP_KV_EVENT_PORT": "6000", "DYN_EPP_DATA_PARALLEL_SIZE": "2", "DYN_EPP_KV_EVENT_PORT_STRIDE": "3",
		"DYN_MODEL_NAME": "qwen", "DYN_KV_CACHE_BLOCK_SIZE": "64", "DYN_EPP_TOTAL_KV_BLOCKS": "1000",
	}
	env := func(k string) (string, bool) { v, ok := envs[k]; return v, ok }
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := RegisterFlags(fs, env, &c); err != nil {
		t.Fatal(err)
	}
	if err := RegisterWorkerFlags(fs, env, &c); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--pool-name", "pool-b", "--kv-events-replay-port", "0", "--max-num-batched-tokens", "8192", "--role-label", "llm-d.ai/role"}); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Kubeconfig, want.PoolName, want.Namespace = "/k", "pool-b", "ns-pod"
	want.KVEventsPort, want.DataParallelSize, want.KVEventsPortStride = 6000, 2, 3
	want.ModelName, want.BlockSize, want.TotalKVBlocks, want.MaxNumBatchedTokens = "qwen", 64, 1000, 8192
	want.RoleLabel = "llm-d.ai/role"
	if c.Kubeconfig != want.Kubeconfig || c.PoolName != want.PoolName || c.Namespace != want.Namespace || c.KVEventsPort != want.KVEventsPort ||
		c.DataParallelSize != want.DataParallelSize || c.KVEventsPortStride != want.KVEventsPortStride || c.ModelName != want.ModelName ||
		c.BlockSize != want.BlockSize || c.TotalKVBlocks != want.TotalKVBlocks || c.MaxNumBatchedTokens != want.MaxNumBatchedTokens ||
		c.RoleLabel != want.RoleLabel || c.Debounce != DefaultDebounce {
		t.Fatalf("config %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	// Selector mode from flags; NAMESPACE beats POD_NAMESPACE.
	envs = map[string]string{"NAMESPACE": "ns", "POD_NAMESPACE": "ns-pod"}
	c = DefaultConfig()
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := RegisterFlags(fs, env, &c); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000, 8001"}); err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "ns" || c.Selector != "app=vllm" || len(c.TargetPorts) != 2 || c.TargetPorts[0] != 8000 || c.TargetPorts[1] != 8001 {
		t.Fatalf("selector mode: %+v", c)
	}
	if err := fs.Parse([]string{"--endpoint-target-ports", "x"}); err == nil {
		t.Error("a bad port list parsed")
	}

	envs = map[string]string{"DYN_EPP_KV_EVENT_PORT": "nope"}
	if err := RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError), env, &c); !errors.Is(err, ErrConfig) {
		t.Errorf("an unparsable variable: %v", err)
	}
}
