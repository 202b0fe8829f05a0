package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvselect/kvselect/sched"
)

func TestParseDisaggEnums(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DisaggOrder
		ok   bool
	}{
		{"decode_anchored", DecodeAnchored, true},
		{" Decode-Anchored ", DecodeAnchored, true},
		{"prefill-anchored", PrefillAnchored, true},
		{"PREFILL_ANCHORED", PrefillAnchored, true},
		{"decode", DisaggOrderDefault, false},
		{"", DisaggOrderDefault, false},
	} {
		if got, ok := ParseDisaggOrder(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("ParseDisaggOrder(%q) = %v, %t", tc.in, got, ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want PrefillFailurePolicy
		ok   bool
	}{
		{"free_decode", FreeDecode, true},
		{"bypass-on-decode", BypassOnDecode, true},
		{"bypass", PrefillFailureDefault, false},
	} {
		if got, ok := ParsePrefillFailurePolicy(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("ParsePrefillFailurePolicy(%q) = %v, %t", tc.in, got, ok)
		}
	}
	b, _ := json.Marshal([]PlanState{PlanIdle, PlanBypassAfterPrefillFailure, PlanReleased})
	if string(b) != `["idle","bypass_after_prefill_failure","released"]` {
		t.Errorf("states marshal as %s", b)
	}
}

// TestCoordinatorErrorTexts: the reference's texts and the class each
// variant maps to.
func TestCoordinatorErrorTexts(t *testing.T) {
	inner := errorf(ErrNotReady, "no schedulable workers for model=m routing_group=g")
	conflict := errorf(ErrConflict, "selection x/decode is already reserved or being reserved")
	for _, tc := range []struct {
		err   *CoordinatorError
		text  string
		class error
	}{
		{&CoordinatorError{Failure: DecodePreviewFailed, Err: inner}, "decode preview failed: no schedulable workers for model=m routing_group=g", ErrNotReady},
		{&CoordinatorError{Failure: DecodeCommitFailed, Err: conflict}, "decode booking failed: selection x/decode is already reserved or being reserved", ErrConflict},
		{&CoordinatorError{Failure: PrefillCommitFailed, Err: inner}, "prefill booking failed: no schedulable workers for model=m routing_group=g", ErrNotReady},
		{&CoordinatorError{Failure: InvalidPlanState, Operation: "plan_decode", Expected: "a prefill booking and no decode booking", State: PlanLinked},
			"plan is in state linked; plan_decode needs a prefill booking and no decode booking", ErrConflict},
		{&CoordinatorError{Failure: MissingTopologyDomain, WorkerID: 7, Domain: "zone"}, `worker 7 has kv_transfer_domain "zone" but no matching topology domain`, ErrNotReady},
		{&CoordinatorError{Failure: MissingEnforcement, WorkerID: 2, Domain: "zone"}, `worker 2 has kv_transfer_domain "zone" but no kv_transfer_enforcement`, ErrNotReady},
		{&CoordinatorError{Failure: MissingPreferredWeight, WorkerID: 3}, "worker 3 has preferred KV transfer enforcement but no kv_transfer_preferred_weight", ErrNotReady},
	} {
		if tc.err.Error() != tc.text {
			t.Errorf("%d: text %q, want %q", tc.err.Failure, tc.err.Error(), tc.text)
		}
		if ClassOf(tc.err) != tc.class {
			t.Errorf("%d: class %v, want %v", tc.err.Failure, ClassOf(tc.err), tc.class)
		}
	}
	var ce *CoordinatorError
	if !errors.As(error(&CoordinatorError{Failure: DecodeCommitFailed, Err: inner}), &ce) || !errors.Is(ce, inner) {
		t.Fatal("the pool's error is reachable through the coordinator's")
	}
}

func TestDisaggConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.Disagg.Order = PrefillAnchored + 1
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("order out of range: %v", err)
	}
	c = DefaultConfig()
	c.Disagg = DisaggConfig{Order: PrefillAnchored, PrefillFailure: BypassOnDecode}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestPromptTokens: the policy's prompt length is token_ids', else
// isl_tokens; multimodal routing tokens are not counted (as in Dynamo).
func TestPromptTokens(t *testing.T) {
	for _, tc := range []struct {
		p    Prompt
		want uint64
	}{
		{Prompt{TokenIDs: []uint32{1, 2, 3}, HasTokenIDs: true, ISLTokens: 99, HasISLTokens: true}, 3},
		{Prompt{ISLTokens: 99, HasISLTokens: true}, 99},
		{Prompt{RoutingTokenIDs: []uint32{1, 2, 3, 4}}, 0},
		{Prompt{RoutingTokenIDs: []uint32{1, 2, 3, 4}, TokenIDs: []uint32{1}, HasTokenIDs: true}, 1},
	} {
		if got := promptTokens(&tc.p); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.p, got, tc.want)
		}
	}
}

// TestPlansRefusedAfterClose: after Close, planning and plan_decode fail as
// not ready ("selection service is shutting down") before any pool call,
// and change nothing; completing and releasing a plan keep working, as
// every lifecycle call does.
func TestPlansRefusedAfterClose(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	s := disaggService(t, &now)
	req := disaggReq("p", PrefillAnchored)
	req.DeferDecode = true
	if _, err := s.PlanDisagg(req); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.PlanDisagg(disaggReq("q", DecodeAnchored)); !errors.Is(err, ErrNotReady) || err.Error() != "selection service is shutting down" {
		t.Fatalf("plan after close: %v", err)
	}
	if _, err := s.PlanDecode("p"); !errors.Is(err, ErrNotReady) || err.Error() != "selection service is shutting down" {
		t.Fatalf("plan_decode after close: %v", err)
	}
	if v, err := s.DisaggPlan("p"); err != nil || v.State != PlanPrefillCommitted || v.Prefill == nil {
		t.Fatalf("plan changed by a refused plan_decode: %+v %v", v, err)
	}
	if err := s.DisaggPrefillComplete("p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseDisagg("p"); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Plans != 0 || st.Reservations != 0 {
		t.Fatalf("left after release: %d plans, %d reservations", st.Plans, st.Reservations)
	}
}

// TestPlanOverridesValidatedFirst: an invalid prefill or decode override is
// a bad request naming its field, raised before any pool call, so the
// decode-anchored order never books (and frees) decode for it.
func TestPlanOverridesValidatedFirst(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	s := disaggService(t, &now)
	neg := -1.0
	for _, tc := range []struct {
		set  func(*DisaggRequest)
		want string
	}{
		{func(r *DisaggRequest) { r.PrefillOverride = &Override{RouterTemperature: &neg} }, "prefill_router_config_override: invalid router config: router_temperature must be finite and >= 0, got -1"},
		{func(r *DisaggRequest) { r.DecodeOverride = &Override{OverlapScoreCredit: &neg} }, "decode_router_config_override: invalid router config: overlap_score_credit must be finite and >= 0, got -1"},
	} {
		req := disaggReq("p", DecodeAnchored)
		tc.set(req)
		before := s.Stats().BookOK
		if _, err := s.PlanDisagg(req); !errors.Is(err, ErrBadRequest) || err.Error() != tc.want {
			t.Fatalf("got %v, want %q", err, tc.want)
		}
		if st := s.Stats(); st.BookOK != before || st.Plans != 0 {
			t.Fatalf("a rejected plan booked: %+v", st)
		}
	}
}

// TestDisaggPoolPolicies: Config.Disagg.PrefillPolicy and DecodePolicy
// (DYN_ROUTER_PREFILL_POLICY, DYN_ROUTER_DECODE_POLICY) choose the policy
// of a plan's calls in each pool unless the request's override names one;
// an unknown name is a configuration error.
func TestDisaggPoolPolicies(t *testing.T) {
	last := &sched.SelectionPolicy{Name: "last", Scorers: []sched.Scorer{sched.DefaultScorer{}}, Picker: lastRow{}}
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.SelectionPolicies = []*sched.SelectionPolicy{last}
	bad := cfg
	bad.Disagg.PrefillPolicy = "nope"
	if _, err := New(bad, Options{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown prefill policy: %v", err)
	}
	run := func(prefill, decode string, ov *Override) (uint64, uint64) {
		t.Helper()
		c := cfg
		c.Disagg.PrefillPolicy, c.Disagg.DecodePolicy = prefill, decode
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for id := uint64(1); id <= 6; id++ {
			ep, bs, group := "http://w", uint32(4), "prefill"
			if id > 3 {
				group = "decode"
			}
			if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, ModelName: "model", RoutingGroup: group, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
				t.Fatal(err)
			}
		}
		// Worker 1 and 4 are the default's picks: they are loaded least.
		for _, id := range []uint64{2, 3, 5, 6} {
			group := "prefill"
			if id > 3 {
				group = "decode"
			}
			if _, err := s.Reserve(&ReservationRequest{ModelName: "model", RoutingGroup: group, SelectionID: fmt.Sprint("load-", id), WorkerID: id, HasWorkerID: true,
				Prompt: Prompt{SequenceHashes: []uint64{id}, HasSequenceHashes: true, ISLTokens: 400, HasISLTokens: true}}); err != nil {
				t.Fatal(err)
			}
		}
		req := disaggReq("p", PrefillAnchored)
		req.PrefillOverride = ov
		v, err := s.PlanDisagg(req)
		if err != nil {
			t.Fatal(err)
		}
		return v.Prefill.WorkerID, v.Decode.WorkerID
	}
	if p, d := run("", "", nil); p != 1 || d != 4 {
		t.Fatalf("default policies: prefill %d, decode %d; want 1 and 4", p, d)
	}
	if p, d := run("last", "", nil); p != 3 || d != 4 {
		t.Fatalf("prefill policy last: prefill %d, decode %d; want 3 and 4", p, d)
	}
	if p, d := run("", "last", nil); p != 1 || d != 6 {
		t.Fatalf("decode policy last: prefill %d, decode %d; want 1 and 6", p, d)
	}
	if p, _ := run("last", "", &Override{RoutingPolicy: sched.SelectionDefault}); p != 1 {
		t.Fatalf("the request's routing_policy wins: prefill %d, want 1", p)
	}
}
