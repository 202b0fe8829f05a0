package core

import "testing"

// TestKVEndpointsOptional: with KVEndpointsOptional a worker without a
// kv_events endpoint is schedulable, and WorkerPartition names its
// partition; without it the worker stays incomplete.
func TestKVEndpointsOptional(t *testing.T) {
	for _, optional := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.KVEndpointsOptional = optional
		s, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ep, bs := "http://w1", uint32(16)
		rec, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, ModelName: "m", RoutingGroup: "g", WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}})
		if err != nil {
			t.Fatal(err)
		}
		model, group, size, ok := s.WorkerPartition(1)
		if optional != (rec.Lifecycle == Schedulable) || ok != optional {
			t.Fatalf("optional %v: lifecycle %s, WorkerPartition ok %v (%v)", optional, rec.Lifecycle, ok, rec.NotSchedulableReasons)
		}
		if ok && (model != "m" || group != "g" || size != 16) {
			t.Errorf("WorkerPartition = %q %q %d", model, group, size)
		}
		if _, _, _, ok := s.WorkerPartition(2); ok {
			t.Error("WorkerPartition of an unknown worker")
		}
	}
}
