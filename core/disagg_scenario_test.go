package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// Scenario commands of the disaggregation coordinator (testdata/disagg_*.txt).
// The fixtures are the reference's coordinator tests'
// (ishandhanani/dynamo:lib/kv-router/src/services/selection/coordinator.rs):
// model "model", pools "prefill" and "decode", workers with endpoint
// http://worker-<id>:8000, block_size 4, max_num_batched_tokens 1024 and
// total_kv_blocks 1000; requests of tokens 1..8 with 16 expected output
// tokens. Every plan command prints the error (if any), the plan's view as
// JSON and the load of each pool: the sum of active_requests over its
// partition, as the reference's tests count it.

// applyDisaggConfig handles the coordinator's config keys.
func applyDisaggConfig(cfg *Config, k, v string) bool {
	switch k {
	case "disagg_order":
		cfg.Disagg.Order, _ = ParseDisaggOrder(v)
	case "disagg_failure":
		cfg.Disagg.PrefillFailure, _ = ParsePrefillFailurePolicy(v)
	case "cd":
		cfg.Sched.ConditionalDisaggEnabled = v == "true"
	case "cd_policy":
		cfg.Sched.ConditionalDisaggPolicy, _ = sched.ParseDisaggPolicyKind(v)
	case "cd_eff_isl":
		cfg.Sched.ConditionalDisaggEffISLThreshold, _ = strconv.ParseUint(v, 10, 64)
	case "cd_ratio":
		cfg.Sched.ConditionalDisaggEffISLRatioThreshold, _ = strconv.ParseFloat(v, 64)
	case "expiry":
		d, _ := strconv.Atoi(v)
		cfg.Sched.ActiveRequestExpiry = time.Duration(d) * time.Second
	default:
		return false
	}
	return true
}

// fixedPolicy is a test policy: enabled, and always (or never) bypassing
// (the reference's test-only random policy with probability 1 or 0).
type fixedPolicy struct{ bypass bool }

func (fixedPolicy) IsEnabled() bool                       { return true }
func (fixedPolicy) NeedsPrefillBusy() bool                { return false }
func (f fixedPolicy) ShouldBypass(sched.DisaggInput) bool { return f.bypass }

// poolLoads prints the active requests of the model's two pools.
func poolLoads(s *Service) string {
	n := map[string]int64{}
	for _, pl := range s.Loads("model", "") {
		for _, l := range pl.Loads {
			n[pl.RoutingGroup] += l.ActiveRequests
		}
	}
	return fmt.Sprintf("loads prefill=%d decode=%d", n["prefill"], n["decode"])
}

// planOut prints a coordinator call's outcome.
func planOut(s *Service, v DisaggPlanView, err error) string {
	var b strings.Builder
	if err != nil {
		b.WriteString(errText(err) + "\n")
	}
	if v.SelectionID != "" {
		b.WriteString(jsonLine(v) + "\n")
	}
	b.WriteString(poolLoads(s))
	return b.String()
}

func (e *env) runDisagg(cmd, rest string, a map[string]string) (string, bool) {
	s := e.s
	switch cmd {
	case "worker":
		// worker <id> group=<g> [zone=<z>] [domain=<d>] [enforcement=<e>]
		// [weight=<w>] [no_kv_blocks]
		idS, _, _ := strings.Cut(rest, " ")
		id, _ := strconv.ParseUint(idS, 10, 64)
		ep, bs, batched, kv := fmt.Sprintf("http://worker-%d:8000", id), uint32(4), uint64(1024), uint64(1000)
		spec := WorkerSpec{WorkerID: id, ModelName: "model", RoutingGroup: a["group"], WorkerFields: WorkerFields{
			Endpoint: &ep, BlockSize: &bs, MaxNumBatchedTokens: &batched, TotalKVBlocks: &kv,
		}}
		if _, ok := a["no_kv_blocks"]; ok {
			spec.TotalKVBlocks = nil
		}
		if z, ok := a["zone"]; ok {
			spec.TopologyDomains = map[string]string{"zone": z}
			spec.Taints = []string{topologyTaintPrefix + "zone=" + z}
		}
		if d, ok := a["domain"]; ok {
			spec.KVTransferDomain = &d
		}
		if en, ok := a["enforcement"]; ok {
			spec.KVTransferEnforcement = &en
		}
		if w, ok := a["weight"]; ok {
			f, _ := strconv.ParseFloat(w, 64)
			spec.KVTransferPreferredWeight = &f
		}
		r, err := s.UpsertWorker(&spec)
		if err != nil {
			return errText(err), true
		}
		return fmt.Sprintf("%d %s/%s %s taints=%v", r.WorkerID, r.ModelName, r.RoutingGroup, r.Lifecycle, r.Taints), true
	case "force_policy":
		s.disaggPolicy = fixedPolicy{bypass: rest == "always"}
		return "ok", true
	case "plan":
		req := DisaggRequest{SelectionID: a["id"], ModelName: "model", Prompt: prompt(a)}
		if _, ok := a["tokens"]; !ok && !req.HasISLTokens {
			req.TokenIDs, req.HasTokenIDs = []uint32{1, 2, 3, 4, 5, 6, 7, 8}, true
		}
		req.ExpectedOutputTokens, req.HasExpectedOutputTokens = 16, true
		req.PrefillRoutingGroup, req.DecodeRoutingGroup = a["prefill_group"], a["decode_group"]
		req.Order, _ = ParseDisaggOrder(a["order"])
		req.PrefillFailure, _ = ParsePrefillFailurePolicy(a["failure"])
		_, req.DeferDecode = a["defer"]
		if v, ok := a["pin"]; ok {
			w, r, _ := strings.Cut(v, "/")
			wid, _ := strconv.ParseUint(w, 10, 64)
			rk, _ := strconv.ParseUint(r, 10, 32)
			req.PinnedPrefillWorker = &WorkerKey{WorkerID: wid, DPRank: uint32(rk)}
		}
		if v, ok := a["allowed"]; ok {
			req.AllowedWorkerIDs, req.HasAllowedWorkerIDs = u64s(v), true
		}
		if v, ok := a["required"]; ok {
			req.RequiredTaints = strings.Split(v, ",")
		}
		if v, ok := a["preferred"]; ok {
			t, w, _ := strings.Cut(v, ":")
			f, _ := strconv.ParseFloat(w, 64)
			req.PreferredTaints = []PreferredTaint{{Taint: t, Weight: f}}
		}
		v, err := s.PlanDisagg(&req)
		return planOut(s, v, err), true
	case "plan_decode":
		v, err := s.PlanDecode(rest)
		return planOut(s, v, err), true
	case "plan_prefill_complete":
		err := s.DisaggPrefillComplete(rest)
		v, _ := s.DisaggPlan(rest)
		return planOut(s, v, err), true
	case "plan_release":
		v, err := s.ReleaseDisagg(rest)
		return planOut(s, v, err), true
	case "plan_show":
		v, err := s.DisaggPlan(rest)
		return planOut(s, v, err), true
	case "plan_stats":
		st := s.Stats()
		return fmt.Sprintf("plans=%d ok=%d failed=%d expired=%d probe_failed=%d free_failed=%d reservations=%d",
			st.Plans, st.PlansOK, st.PlansFailed, st.PlansExpired, st.PlanProbeFailed, st.PlanFreeFailed, st.Reservations), true
	}
	return e.runReconciler(cmd, rest, a)
}
