package kube

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvselect/kvselect/core"
)

// This file holds the pure part of discovery: what a pod and a pool mean,
// with no informer and no clock, so that it is tested on its own.

// workerIDBits bounds a worker id to 53 bits, the integers a JSON reader
// that parses numbers as doubles keeps exactly (Dynamo masks its pod-name
// hash the same way: INSTANCE_ID_MASK in
// ai-dynamo/dynamo:lib/runtime/src/discovery/kube/utils.rs).
const workerIDBits = 53

// WorkerID is the catalog id of the pod whose metadata.uid is uid: the
// first 8 bytes of SHA-256("kvselect/pod/" + uid), big-endian, masked to
// 53 bits, 0 mapped to 1.
//
// The UID, not the name: Kubernetes gives every pod object a new UID, so a
// pod deleted and created again under the same name (a StatefulSet's
// vllm-0 after a restart) is a new worker. Its engine starts with an empty
// KV cache, so the old worker's indexed blocks and bookings must go with
// the old id rather than be inherited by the new pod. Dynamo hashes the
// pod name (hash_pod_name, same file as above), which keeps the id across
// such a restart. The id is the same in every process that sees the pod
// (replicas agree without talking) and for the pod's whole life, whatever
// its IP, labels or readiness do.
func WorkerID(uid string) uint64 {
	sum := sha256.Sum256([]byte("kvselect/pod/" + uid))
	id := binary.BigEndian.Uint64(sum[:8]) & (1<<workerIDBits - 1)
	return max(id, 1)
}

// podReady reports whether pod may serve: condition Ready is True and the
// pod is not terminating (no deletionTimestamp), as Dynamo's pod_is_ready
// (ai-dynamo/dynamo:deploy/inference-gateway/ext-proc/src/pod_discovery.rs)
// and llm-d's datastore (llm-d/llm-d-router:pkg/epp/datastore/datastore.go)
// decide it.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// target is what selects the workers: a label selector and the engine's
// HTTP port (from an InferencePool, or from the flags).
type target struct {
	selector labels.Selector
	port     int
	// extraPorts counts target ports past the first, which are ignored
	// (see parsePool).
	extraPorts int
	// group, when set, is the routing group of every worker t selects
	// (each pool of a disaggregated pair has its own); empty: the pod's
	// Config.RoleLabel value, else Config.RoutingGroup.
	group string
}

// errPoolInvalid marks an InferencePool whose spec kvselect cannot use:
// the membership is empty while it is so.
var errPoolInvalid = errors.New("kube: InferencePool spec unusable")

// parsePool reads the spec of an inference.networking.k8s.io/v1
// InferencePool (kubernetes-sigs/gateway-api-inference-extension:
// api/v1/inferencepool_types.go): spec.selector.matchLabels (at least
// one pair, as Dynamo requires: an empty selector would select every pod
// of the namespace) and spec.targetPorts[].number. The API allows one to
// eight target ports (each an endpoint of its own in llm-d); kvselect
// registers one worker per pod, at the first port, and counts the rest as
// ignored (Dynamo refuses a pool with more than one). A pool written in
// the v1alpha2 form, spec.targetPortNumber, is read too.
func parsePool(obj *unstructured.Unstructured) (target, error) {
	ml, found, err := unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
	if err != nil || !found || len(ml) == 0 {
		return target{}, fmt.Errorf("%w: spec.selector.matchLabels is missing or empty", errPoolInvalid)
	}
	sel, err := labels.ValidatedSelectorFromSet(ml)
	if err != nil {
		return target{}, fmt.Errorf("%w: spec.selector.matchLabels: %v", errPoolInvalid, err)
	}
	var ports []int64
	tps, found, err := unstructured.NestedSlice(obj.Object, "spec", "targetPorts")
	switch {
	case err != nil:
		return target{}, fmt.Errorf("%w: spec.targetPorts: %v", errPoolInvalid, err)
	case found:
		for i, tp := range tps {
			m, ok := tp.(map[string]any)
			if !ok {
				return target{}, fmt.Errorf("%w: spec.targetPorts[%d] is not an object", errPoolInvalid, i)
			}
			n, ok, err := unstructured.NestedInt64(m, "number")
			if err != nil || !ok {
				return target{}, fmt.Errorf("%w: spec.targetPorts[%d].number is missing or not an integer", errPoolInvalid, i)
			}
			ports = append(ports, n)
		}
	default:
		if n, ok, err := unstructured.NestedInt64(obj.Object, "spec", "targetPortNumber"); err == nil && ok {
			ports = append(ports, n)
		}
	}
	if len(ports) == 0 {
		return target{}, fmt.Errorf("%w: spec.targetPorts is missing or empty", errPoolInvalid)
	}
	if ports[0] < 1 || ports[0] > 65535 {
		return target{}, fmt.Errorf("%w: target port %d is outside 1-65535", errPoolInvalid, ports[0])
	}
	return target{selector: sel, port: int(ports[0]), extraPorts: len(ports) - 1}, nil
}

// workerFor returns the catalog record of pod, or false when the pod is
// not a worker: not matched by t, not Ready, terminating, without a UID
// or without a valid IP. Endpoints join the IP and the port as
// net.JoinHostPort does (an IPv6 address in brackets); rank r of a
// data-parallel engine publishes KV events on KVEventsPort +
// r·KVEventsPortStride (Dynamo's KvEventPorts, ishandhanani/dynamo:
// deploy/inference-gateway/ext-proc/src/pod_discovery.rs).
func (c *Config) workerFor(pod *corev1.Pod, t *target) (core.WorkerSpec, bool) {
	if t == nil || !t.selector.Matches(labels.Set(pod.Labels)) || !podReady(pod) || pod.UID == "" {
		return core.WorkerSpec{}, false
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return core.WorkerSpec{}, false
	}
	host := ip.String()
	addr := func(scheme string, port int) *string {
		s := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
		return &s
	}
	group := c.RoutingGroup
	switch {
	case t.group != "":
		group = t.group
	case c.RoleLabel != "" && pod.Labels[c.RoleLabel] != "":
		group = pod.Labels[c.RoleLabel]
	}
	dp := uint32(c.DataParallelSize)
	blockSize := c.BlockSize
	spec := core.WorkerSpec{
		WorkerID:     WorkerID(string(pod.UID)),
		ModelName:    c.ModelName,
		RoutingGroup: group,
		WorkerFields: core.WorkerFields{
			Endpoint:         addr("http", t.port),
			BlockSize:        &blockSize,
			DataParallelSize: &dp,
		},
	}
	if c.KVEventsPort > 0 {
		spec.KVEventsEndpoints = make(map[uint32]string, dp)
		for r := range dp {
			spec.KVEventsEndpoints[r] = *addr("tcp", c.KVEventsPort+int(r)*c.KVEventsPortStride)
		}
	}
	if c.ReplayPort > 0 {
		spec.ReplayEndpoint = addr("tcp", c.ReplayPort)
	}
	if c.TotalKVBlocks > 0 {
		v := c.TotalKVBlocks
		spec.TotalKVBlocks = &v
	}
	if c.MaxNumBatchedTokens > 0 {
		v := c.MaxNumBatchedTokens
		spec.MaxNumBatchedTokens = &v
	}
	return spec, true
}

// membership is the snapshot of pods under ts, the targets in priority
// order (one, or a disaggregated pair: decode, then prefill): one record
// per worker pod, sorted by worker id. A pod is a worker of the first
// target that takes it; a later target whose selector also matches it
// (a pod in both pools) does not get it, and it is counted in overlapped,
// since one worker id has one routing group. matched counts the pods
// some target matches (ready or not); collided the worker pods whose id
// an earlier pod (in name order) already had, a 53-bit collision: they
// are left out. perTarget[i] counts the workers of ts[i]. A nil target
// (a pool absent or unusable) selects nothing.
func (c *Config) membership(pods []*corev1.Pod, ts ...*target) (specs []core.WorkerSpec, perTarget []int, matched, collided, overlapped int) {
	specs = []core.WorkerSpec{}
	perTarget = make([]int, len(ts))
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	ids := map[uint64]struct{}{}
	for _, p := range pods {
		set := labels.Set(p.Labels)
		taken, anyMatch := false, false
		for i, t := range ts {
			if t == nil || !t.selector.Matches(set) {
				continue
			}
			anyMatch = true
			if taken {
				overlapped++
				continue
			}
			sp, ok := c.workerFor(p, t)
			if !ok {
				continue
			}
			taken = true
			if _, dup := ids[sp.WorkerID]; dup {
				collided++
				continue
			}
			ids[sp.WorkerID] = struct{}{}
			specs = append(specs, sp)
			perTarget[i]++
		}
		if anyMatch {
			matched++
		}
	}
	slices.SortFunc(specs, func(a, b core.WorkerSpec) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	return specs, perTarget, matched, collided, overlapped
}
