package core

import (
	"fmt"
	"testing"
	"time"
)

// disaggSessionService is a service with hard session affinity, prefill
// workers 1 and 2 and decode workers 3 and 4 of model "model".
func disaggSessionService(t *testing.T) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.SessionAffinity = AffinityConfig{TTL: 10 * time.Second, Mode: AffinityHard}
	now := time.Unix(1_700_000_000, 0)
	s, err := New(cfg, Options{Clock: func() time.Time { return now }, Rand: firstRand{}})
	if err != nil {
		t.Fatal(err)
	}
	for id, group := range map[uint64]string{1: "prefill", 2: "prefill", 3: "decode", 4: "decode"} {
		ep, bs := "http://w", uint32(4)
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, ModelName: "model", RoutingGroup: group, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// boundIn returns the worker session is bound to in (model, group), 0
// when it is not bound there.
func boundIn(s *Service, group, session string) uint64 {
	w, _ := bindingIn(s, group, session)
	return w
}

// bindingIn returns session's bound worker in (model, group) and the
// leases on the binding (0, 0 when unbound).
func bindingIn(s *Service, group, session string) (uint64, int) {
	p := s.lookup("model", group)
	if p == nil || p.affinity == nil {
		return 0, 0
	}
	sh := p.affinity.shard(session)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[session]; e != nil && e.bound {
		return e.target.WorkerID, e.leases
	}
	return 0, 0
}

// sessionPlan is a plan of session (none when "") with a prompt of its
// own, so that no cached prefix steers it.
func sessionPlan(id string, order DisaggOrder, session string, first uint32) *DisaggRequest {
	r := &DisaggRequest{SelectionID: id, ModelName: "model", Order: order, SessionID: session,
		Prompt: Prompt{TokenIDs: []uint32{first, first + 1, first + 2, first + 3, first + 4, first + 5, first + 6, first + 7}, HasTokenIDs: true}}
	return r
}

// TestDisaggPlansBindSessions: as the reference's coordinator, a plan
// passes its session to every pool call. Prefill-anchored, both bookings
// bind the session in their pool's partition and the session's next plan
// follows the bindings, however loaded those workers are; decode-anchored,
// the decode commit is pinned to the preview (a pin wins over a binding,
// so it binds nothing) while the prefill commit binds; an affinity target
// takes the plan's session out of affinity.
func TestDisaggPlansBindSessions(t *testing.T) {
	s := disaggSessionService(t)
	first, err := s.PlanDisagg(sessionPlan("a", PrefillAnchored, "s", 100))
	if err != nil {
		t.Fatal(err)
	}
	pw, dw := first.Prefill.WorkerID, first.Decode.WorkerID
	if boundIn(s, "prefill", "s") != pw || boundIn(s, "decode", "s") != dw {
		t.Fatalf("bindings prefill %d decode %d, plan on %d and %d", boundIn(s, "prefill", "s"), boundIn(s, "decode", "s"), pw, dw)
	}
	// Without a session the next plan goes to the idle workers; with it,
	// to the bound (loaded) ones.
	other, err := s.PlanDisagg(sessionPlan("b", PrefillAnchored, "", 200))
	if err != nil {
		t.Fatal(err)
	}
	if other.Prefill.WorkerID == pw || other.Decode.WorkerID == dw {
		t.Fatalf("a plan without a session went to the loaded workers %d and %d", other.Prefill.WorkerID, other.Decode.WorkerID)
	}
	if _, err := s.ReleaseDisagg("b"); err != nil {
		t.Fatal(err)
	}
	again, err := s.PlanDisagg(sessionPlan("c", PrefillAnchored, "s", 300))
	if err != nil {
		t.Fatal(err)
	}
	if again.Prefill.WorkerID != pw || again.Decode.WorkerID != dw {
		t.Fatalf("the session's next plan went to %d and %d, bound to %d and %d", again.Prefill.WorkerID, again.Decode.WorkerID, pw, dw)
	}
	// Each leg holds a lease on its pool's binding until it ends.
	if _, n := bindingIn(s, "prefill", "s"); n != 2 {
		t.Fatalf("%d leases on the prefill binding, want 2", n)
	}
	for _, id := range []string{"a", "c"} {
		if _, err := s.ReleaseDisagg(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"prefill", "decode"} {
		if w, n := bindingIn(s, g, "s"); n != 0 || w == 0 {
			t.Fatalf("%s binding after the plans ended: worker %d, %d leases", g, w, n)
		}
	}

	da, err := s.PlanDisagg(sessionPlan("d", DecodeAnchored, "t", 400))
	if err != nil {
		t.Fatal(err)
	}
	if da.Prefill == nil || boundIn(s, "prefill", "t") != da.Prefill.WorkerID || boundIn(s, "decode", "t") != 0 {
		t.Fatalf("decode-anchored: prefill binding %d (plan %+v), decode binding %d, want none", boundIn(s, "prefill", "t"), da.Prefill, boundIn(s, "decode", "t"))
	}

	target := sessionPlan("e", PrefillAnchored, "u", 500)
	target.AffinityTarget = &AffinityTarget{WorkerID: 2}
	if _, err := s.PlanDisagg(target); err != nil {
		t.Fatal(err)
	}
	if boundIn(s, "prefill", "u") != 0 || boundIn(s, "decode", "u") != 0 {
		t.Fatal("a plan with an affinity target bound its session")
	}
}

// TestDisaggAffinityTargetWithoutSession: a plan's affinity_target steers
// plan_prefill and plan_decode (and the decode-anchored preview, hence its
// decode commit) even without a session, as the reference passes it to
// those calls; it binds nothing.
func TestDisaggAffinityTargetWithoutSession(t *testing.T) {
	s := disaggSessionService(t)
	for i, c := range []struct {
		order                   DisaggOrder
		target                  uint64
		wantPrefill, wantDecode uint64
	}{
		{PrefillAnchored, 1, 1, 0}, // the target is a prefill worker: decode goes where load says
		{PrefillAnchored, 3, 0, 3},
		{DecodeAnchored, 3, 0, 3},
	} {
		r := sessionPlan(fmt.Sprint("t", i), c.order, "", uint32(1000*(i+1)))
		r.AffinityTarget = &AffinityTarget{WorkerID: c.target}
		v, err := s.PlanDisagg(r)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if (c.wantPrefill != 0 && v.Prefill.WorkerID != c.wantPrefill) || (c.wantDecode != 0 && v.Decode.WorkerID != c.wantDecode) {
			t.Fatalf("case %d: prefill %+v decode %+v, want %d and %d", i, v.Prefill, v.Decode, c.wantPrefill, c.wantDecode)
		}
		if _, err := s.ReleaseDisagg(v.SelectionID); err != nil {
			t.Fatal(err)
		}
	}
}
