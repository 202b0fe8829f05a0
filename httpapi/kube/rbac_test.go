package kube

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestRBACManifest: the example RBAC (cmd/kvselect/kubernetes-discovery.yaml)
// decodes strictly as Kubernetes objects, and its Role grants what the
// source's informers do (get, list and watch of pods and inferencepools),
// bound to its ServiceAccount.
func TestRBACManifest(t *testing.T) {
	raw, err := os.ReadFile("../../cmd/kvselect/kubernetes-discovery.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	docs := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var sa *corev1.ServiceAccount
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		default:
			t.Errorf("unexpected %T", obj)
		}
	}
	if sa == nil || role == nil || binding == nil {
		t.Fatalf("want a ServiceAccount, a Role and a RoleBinding: %v %v %v", sa, role, binding)
	}
	grants := func(group, resource string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
				slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				return true
			}
		}
		return false
	}
	if !grants("", "pods") || !grants(PoolResource.Group, PoolResource.Resource) {
		t.Errorf("the Role does not grant get/list/watch on pods and %s: %+v", PoolResource, role.Rules)
	}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, v) {
				t.Errorf("the Role grants %q: discovery is read-only", v)
			}
		}
	}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa.Name {
		t.Errorf("the RoleBinding does not bind %s to %s: %+v", role.Name, sa.Name, binding)
	}
}
