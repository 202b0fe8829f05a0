package kube

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// manifestDocs returns the YAML documents of a file under cmd/kvselect.
func manifestDocs(t *testing.T, name string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("../../cmd/kvselect/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
}

// TestEPPManifests: the EPP example (cmd/kvselect/kubernetes-epp.yaml)
// decodes strictly (the Deployment and Service through client-go's
// scheme; the InferencePool, Gateway and HTTPRoute, which have no
// generated types here, as objects whose fields are checked), this
// package reads its InferencePool (parsePool), and its parts agree: the
// Deployment runs `kvselect epp` for that pool under the RBAC's
// ServiceAccount with gRPC-health probes on 9003, the Service exposes its
// ext_proc port 9002, the pool's endpointPickerRef names that Service and
// port, and the HTTPRoute sends the Gateway's traffic to the pool.
func TestEPPManifests(t *testing.T) {
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var dep *appsv1.Deployment
	var svc *corev1.Service
	objs := map[string]*unstructured.Unstructured{}
	for _, doc := range manifestDocs(t, "kubernetes-epp.yaml") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		switch u.GetKind() {
		case "Deployment", "Service":
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, doc)
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				dep = o
			case *corev1.Service:
				svc = o
			}
		default:
			objs[u.GetKind()] = u
		}
	}
	pool, gw, route := objs["InferencePool"], objs["Gateway"], objs["HTTPRoute"]
	if dep == nil || svc == nil || pool == nil || gw == nil || route == nil || len(objs) != 3 {
		t.Fatalf("want a Deployment, a Service, an InferencePool, a Gateway and an HTTPRoute; got %v %v %v", dep != nil, svc != nil, objs)
	}
	if pool.GetAPIVersion() != PoolResource.GroupVersion().String() || gw.GetAPIVersion() != "gateway.networking.k8s.io/v1" || route.GetAPIVersion() != "gateway.networking.k8s.io/v1" {
		t.Fatalf("api versions: %s %s %s", pool.GetAPIVersion(), gw.GetAPIVersion(), route.GetAPIVersion())
	}
	if _, err := parsePool(pool); err != nil {
		t.Fatalf("the pool does not parse as discovery reads it: %v", err)
	}
	// The RBAC's ServiceAccount runs the picker.
	var sa string
	for _, doc := range manifestDocs(t, "kubernetes-discovery.yaml") {
		if obj, _, err := strict.Decode(doc, nil, nil); err == nil {
			if o, ok := obj.(*corev1.ServiceAccount); ok {
				sa = o.Name
			}
		}
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName == "" || pod.ServiceAccountName != sa {
		t.Errorf("the Deployment runs as %q, the RBAC grants %q", pod.ServiceAccountName, sa)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if len(c.Args) == 0 || c.Args[0] != "epp" || env["DYN_EPP_INFERENCE_POOL_NAME"] != pool.GetName() || env["DYN_MODEL_NAME"] == "" || env["DYN_KV_CACHE_BLOCK_SIZE"] == "" {
		t.Errorf("the container does not run kvselect epp for pool %q with a model and block size: args %v env %v", pool.GetName(), c.Args, env)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != 9002 || ports["grpc-health"] != 9003 || ports["metrics"] != 9090 {
		t.Errorf("container ports %v: want GIE's 9002, 9003, 9090", ports)
	}
	for what, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.GRPC == nil || pr.GRPC.Port != 9003 || pr.GRPC.Service == nil || *pr.GRPC.Service != what {
			t.Errorf("%s probe %+v: want gRPC health on 9003, service %q", what, pr, what)
		}
	}
	// The Service selects the Deployment's pods and exposes ext_proc.
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, the pods are %v", k, v, dep.Spec.Template.Labels)
		}
	}
	var extproc bool
	for _, p := range svc.Spec.Ports {
		extproc = extproc || p.Port == 9002 && p.TargetPort.String() == "grpc"
	}
	if !extproc {
		t.Errorf("the Service has no port 9002 to the container's grpc port: %+v", svc.Spec.Ports)
	}
	// The pool names the picker's Service and port.
	ref, _, _ := unstructured.NestedMap(pool.Object, "spec", "endpointPickerRef")
	num, _, _ := unstructured.NestedInt64(ref, "port", "number")
	if ref["name"] != svc.Name || ref["kind"] != "Service" || num != 9002 || !slices.Contains([]any{"FailClose", "FailOpen"}, ref["failureMode"]) {
		t.Errorf("endpointPickerRef %v: want Service %s port 9002", ref, svc.Name)
	}
	// The route sends the Gateway's traffic to the pool.
	parents, _, _ := unstructured.NestedSlice(route.Object, "spec", "parentRefs")
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
	if len(parents) != 1 || parents[0].(map[string]any)["name"] != gw.GetName() || len(rules) == 0 {
		t.Fatalf("HTTPRoute parents %v rules %v", parents, rules)
	}
	backends, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "backendRefs")
	if len(backends) != 1 {
		t.Fatalf("backendRefs %v", backends)
	}
	b := backends[0].(map[string]any)
	if b["kind"] != "InferencePool" || b["group"] != PoolResource.Group || b["name"] != pool.GetName() {
		t.Errorf("the route's backend %v is not the pool %s", b, pool.GetName())
	}
	if !strings.Contains(string(manifestDocs(t, "kubernetes-epp.yaml")[0]), "kubernetes-discovery.yaml") {
		t.Error("the file's header does not say to apply the RBAC first")
	}
}
