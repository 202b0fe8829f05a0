package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Scenario commands of the catalog reconciler (testdata/reconciler.txt).

// reconState is a scenario's reconciler and its observer.
type reconState struct {
	r *CatalogReconciler
	countingObserver
}

// countingObserver counts the observer's calls.
type countingObserver struct{ upserts, removals atomic.Int64 }

func (o *countingObserver) Upserted(WorkerRecord) { o.upserts.Add(1) }
func (o *countingObserver) Removed(WorkerRecord)  { o.removals.Add(1) }

func (e *env) runReconciler(cmd, rest string, a map[string]string) (string, bool) {
	s := e.s
	snapshot := func(body string) []WorkerSpec {
		var specs []WorkerSpec
		if err := json.Unmarshal([]byte(body), &specs); err != nil {
			e.t.Fatalf("%s: %v", body, err)
		}
		return specs
	}
	switch cmd {
	case "reconciler":
		// reconciler [exclusive] [name=<n>]
		st := &reconState{}
		_, excl := a["exclusive"]
		r, err := NewCatalogReconciler(s, ReconcilerConfig{Name: a["name"], Exclusive: excl, Observer: &st.countingObserver})
		if err != nil {
			return errText(err), true
		}
		st.r = r
		e.recon = st
		return "ok", true
	case "apply":
		return okOr(e.recon.r.Apply(snapshot(rest))) + "\n" + e.reconState(), true
	case "offer":
		return okOr(e.recon.r.Offer(snapshot(rest), e.now)) + "\n" + e.reconState(), true
	case "retry":
		ran, err := e.recon.r.Retry(e.now)
		return fmt.Sprintf("ran=%t %s\n%s", ran, okOr(err), e.reconState()), true
	case "stop":
		return okOr(e.recon.r.Stop()) + "\n" + e.reconState(), true
	case "close_reconciler":
		e.recon.r.Close()
		return "closed", true
	case "fail_upsert":
		if rest == "none" {
			s.failUpsert = nil
			return "ok", true
		}
		ids := u64s(rest)
		s.failUpsert = func(id uint64) error {
			if slices.Contains(ids, id) {
				return errorf(ErrInternal, "test hook: upsert of worker %d fails", id)
			}
			return nil
		}
		return "ok", true
	case "publishes":
		return fmt.Sprintf("publishes=%d", s.Stats().CatalogPublishes), true
	}
	return "", false
}

// reconState prints the reconciler's state, its observer's counts and the
// catalog.
func (e *env) reconState() string {
	st := e.recon
	r := st.r
	ids := func(m map[uint64]struct{}) []uint64 {
		var out []uint64
		for id := range m {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	conv := map[uint64]struct{}{}
	for id := range r.converged {
		conv[id] = struct{}{}
	}
	pending := "none"
	if at, ok := r.RetryAt(); ok {
		pending = "+" + at.Sub(e.now).String()
	}
	var cat []string
	for _, w := range e.s.ListWorkers("", "") {
		cat = append(cat, fmt.Sprintf("%d:%s/%s:%s", w.WorkerID, w.RoutingGroup, deref(w.Endpoint, "-"), w.Lifecycle))
	}
	rs := r.Stats()
	return fmt.Sprintf("tracked=%v converged=%v pending=%s upserts=%d removals=%d passes=%d failures=%d publishes=%d\ncatalog=[%s]",
		ids(r.tracked), ids(conv), pending, st.upserts.Load(), st.removals.Load(), rs.Passes, rs.Failures,
		e.s.Stats().CatalogPublishes, strings.Join(cat, " "))
}
