package core

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Worker membership from a discovery source: Dynamo's CatalogReconciler
// and WorkerCatalogSource (ishandhanani/dynamo:lib/kv-router/src/services/
// selection/membership.rs, the batch-applying version that continues past
// failures and retries after 5 s).

// DefaultReconcileRetryDelay is how long a snapshot whose pass failed waits
// before it is applied again, unless a newer snapshot arrives first
// (RECONCILE_RETRY_DELAY).
const DefaultReconcileRetryDelay = 5 * time.Second

// CatalogSource is a discovery source (a workers file, a Kubernetes
// reflector): a stream of complete desired memberships, never deltas, so a
// missed change cannot leave a stale worker behind. Each snapshot is a list
// of POST /workers records.
type CatalogSource interface {
	// Snapshots returns the channel the source sends its snapshots on:
	// the current membership first, without waiting, then one snapshot
	// per change. The source closes it when it stops; the receiver owns
	// every snapshot it receives. The source runs its own goroutine.
	Snapshots() <-chan []WorkerSpec
}

// CatalogObserver is told of every catalog change a reconciler makes (for
// metrics). Its methods run on the reconciler's goroutine, no lock held.
type CatalogObserver interface {
	// Upserted: after every successful upsert, whatever the lifecycle.
	Upserted(rec WorkerRecord)
	// Removed: after every successful delete.
	Removed(rec WorkerRecord)
}

// ReconcilerConfig configures a CatalogReconciler.
type ReconcilerConfig struct {
	// Name names the source (e.g. "--workers-file").
	Name string
	// Exclusive makes the source the catalog's only writer while the
	// reconciler is open: UpsertWorker, PatchWorker and DeleteWorker are
	// refused with a conflict, "worker catalog is managed by <Name>".
	// (The reconciler skips records it believes converged, so a manual
	// change would otherwise persist until the source changes the record.)
	Exclusive bool
	// Observer, when set, is told of every change.
	Observer CatalogObserver
	// RetryDelay is the retry delay of a failed snapshot; 0 picks
	// DefaultReconcileRetryDelay.
	RetryDelay time.Duration
	// After is Run's timer; nil picks time.After. Run reads the time from
	// the Service's clock.
	After func(time.Duration) <-chan time.Time
	// Logf, when set, receives the reference's warnings, from the driving
	// goroutine: a record whose upsert failed or that is not schedulable,
	// a stale worker whose delete failed, a failed pass and its retry,
	// the source's end.
	Logf func(format string, args ...any)
}

// CatalogReconciler applies a source's snapshots to a Service's catalog:
// it upserts new and changed records as one batch, retries records the
// catalog did not accept as schedulable on every snapshot, and deletes
// the workers it introduced that left. It is driven by one goroutine (Run,
// or a host calling Apply, Offer and Retry in turn); Stats and Close may
// be called from any goroutine.
type CatalogReconciler struct {
	s   *Service
	cfg ReconcilerConfig

	// Owned by the driving goroutine:
	// converged[id] is the desired record (normalized) the catalog last
	// reported schedulable: an equal desired record skips its upsert.
	converged map[uint64]WorkerSpec
	// tracked are the worker ids this reconciler introduced, schedulable
	// or not: the only ids it ever deletes.
	tracked map[uint64]struct{}
	// pending is the last snapshot whose pass failed (one slot), applied
	// again at retryAt unless a newer snapshot supersedes it.
	pending    []WorkerSpec
	hasPending bool
	retryAt    time.Time

	passes, failures      atomic.Uint64
	nTracked, nConverged  atomic.Int64
	owns, closed, stopped atomic.Bool
}

// NewCatalogReconciler returns a reconciler of s's catalog. An exclusive
// reconciler takes the catalog's ownership; a conflict when another source
// owns it.
func NewCatalogReconciler(s *Service, cfg ReconcilerConfig) (*CatalogReconciler, error) {
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultReconcileRetryDelay)
	if cfg.After == nil {
		cfg.After = time.After
	}
	r := &CatalogReconciler{s: s, cfg: cfg, converged: map[uint64]WorkerSpec{}, tracked: map[uint64]struct{}{}}
	if cfg.Exclusive {
		name := cfg.Name
		if !s.owner.CompareAndSwap(nil, &name) {
			return nil, s.checkOwner()
		}
		r.owns.Store(true)
	}
	return r, nil
}

// Close gives the catalog's ownership back (public mutations are allowed
// again). The catalog keeps its state.
func (r *CatalogReconciler) Close() {
	if r.owns.Load() && !r.closed.Swap(true) {
		r.s.owner.Store(nil)
	}
}

// normalizeSpec returns sp with its defaults filled and its fields in the
// catalog's canonical form (taints sorted and deduplicated, empty maps), so
// that equal memberships compare equal.
func normalizeSpec(sp *WorkerSpec) WorkerSpec {
	return WorkerSpec{
		WorkerID: sp.WorkerID, ModelName: cmp.Or(sp.ModelName, DefaultPartition),
		RoutingGroup: cmp.Or(sp.RoutingGroup, DefaultPartition), WorkerFields: sp.WorkerFields.clone(),
	}
}

// Apply runs one pass over a desired snapshot. Duplicate worker ids reject
// the snapshot before any change. Otherwise every new, changed or not yet
// schedulable record is upserted (one batch), and every tracked worker the
// snapshot lacks is deleted (not found counts as deleted); a failed upsert
// or delete does not stop the pass, and a worker whose delete failed stays
// tracked. It returns the first error.
func (r *CatalogReconciler) Apply(snapshot []WorkerSpec) error {
	r.passes.Add(1)
	err := r.apply(snapshot)
	if err != nil {
		r.failures.Add(1)
	}
	r.nTracked.Store(int64(len(r.tracked)))
	r.nConverged.Store(int64(len(r.converged)))
	return err
}

func (r *CatalogReconciler) apply(snapshot []WorkerSpec) error {
	desired := make(map[uint64]struct{}, len(snapshot))
	for i := range snapshot {
		id := snapshot[i].WorkerID
		if _, dup := desired[id]; dup {
			return errorf(ErrBadRequest, "duplicate worker_id %d in membership snapshot", id)
		}
		desired[id] = struct{}{}
	}
	var queue []WorkerSpec
	for i := range snapshot {
		want := normalizeSpec(&snapshot[i])
		// Tracked before the upsert: a partly applied record is still
		// deleted when it leaves.
		r.tracked[want.WorkerID] = struct{}{}
		if c, ok := r.converged[want.WorkerID]; ok && reflect.DeepEqual(c, want) {
			continue
		}
		queue = append(queue, want)
	}
	var first error
	for i, res := range r.s.upsertWorkers(queue) {
		id := queue[i].WorkerID
		if res.err != nil {
			r.logf("worker %d upsert failed; continuing the pass: %v", id, res.err)
			first = cmp.Or(first, res.err)
			continue
		}
		if o := r.cfg.Observer; o != nil {
			o.Upserted(res.rec)
		}
		if res.rec.Lifecycle == Schedulable {
			r.converged[id] = queue[i]
		} else {
			r.logf("worker %d upserted but not schedulable (%s: %s); retrying on the next membership snapshot",
				id, res.rec.Lifecycle, strings.Join(res.rec.NotSchedulableReasons, "; "))
			delete(r.converged, id)
		}
	}
	var stale []uint64
	for id := range r.tracked {
		if _, ok := desired[id]; !ok {
			stale = append(stale, id)
		}
	}
	slices.Sort(stale)
	for _, id := range stale {
		rec, err := r.s.deleteWorker(id)
		switch {
		case err == nil:
			if o := r.cfg.Observer; o != nil {
				o.Removed(rec)
			}
		case errors.Is(err, ErrNotFound):
		default:
			r.logf("stale worker %d delete failed; continuing the pass: %v", id, err)
			first = cmp.Or(first, err)
			continue
		}
		delete(r.tracked, id)
		delete(r.converged, id)
	}
	return first
}

// Offer applies a snapshot that arrived at now. If its pass fails, it
// becomes the pending snapshot, applied again RetryDelay after now; a newer
// snapshot supersedes it. It returns the pass's error.
func (r *CatalogReconciler) Offer(snapshot []WorkerSpec, now time.Time) error {
	err := r.Apply(snapshot)
	r.pending, r.hasPending = nil, false
	if err != nil {
		r.logf("membership reconcile failed; retrying in %v: %v", r.cfg.RetryDelay, err)
		r.pending, r.hasPending, r.retryAt = snapshot, true, now.Add(r.cfg.RetryDelay)
	}
	return err
}

func (r *CatalogReconciler) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

// RetryAt returns when the pending snapshot is due, if there is one.
func (r *CatalogReconciler) RetryAt() (time.Time, bool) { return r.retryAt, r.hasPending }

// Retry applies the pending snapshot again if it is due at now (as Offer
// does, so a new failure waits RetryDelay again). It reports whether it
// ran a pass.
func (r *CatalogReconciler) Retry(now time.Time) (bool, error) {
	if !r.hasPending || now.Before(r.retryAt) {
		return false, nil
	}
	return true, r.Offer(r.pending, now)
}

// Stop is the source's end: the reconciler fails closed, deleting every
// worker it introduced, so that selection fails rather than routes to a
// membership nobody maintains. (Dynamo's reconciler keeps the catalog and
// leaves failing closed to sources that send one empty snapshot before
// closing; doing it here covers every source, and is a no-op after such a
// snapshot.) The ownership, if any, is kept.
func (r *CatalogReconciler) Stop() error {
	r.stopped.Store(true)
	r.pending, r.hasPending = nil, false
	return r.Apply(nil)
}

// Run applies src's snapshots until ctx is done (the catalog keeps its
// state: a shutdown) or the source closes its channel (Stop: fail closed,
// whose error Run returns). A snapshot whose pass failed is applied again
// RetryDelay later unless a newer one arrives first. Run blocks; the host
// runs it on a goroutine of its own.
func (r *CatalogReconciler) Run(ctx context.Context, src CatalogSource) error {
	snaps := src.Snapshots()
	for {
		var retry <-chan time.Time
		if at, ok := r.RetryAt(); ok {
			retry = r.cfg.After(at.Sub(r.s.clock()))
		}
		select {
		case <-ctx.Done():
			return nil
		case snap, ok := <-snaps:
			if !ok {
				r.logf("worker membership source %s closed; deleting the workers it introduced", r.cfg.Name)
				return r.Stop()
			}
			_ = r.Offer(snap, r.s.clock())
		case <-retry:
			_, _ = r.Retry(r.s.clock())
		}
	}
}

// ReconcilerStats is a cheap snapshot for metrics.
type ReconcilerStats struct {
	// Passes counts Apply passes (retries included); Failures those that
	// returned an error.
	Passes, Failures uint64
	// Tracked and Converged are the workers the reconciler introduced and
	// those the catalog reported schedulable, after the last pass.
	Tracked, Converged int64
	// Stopped: the source ended and the reconciler failed closed.
	Stopped bool
}

// Stats returns the reconciler's counters; safe from any goroutine.
func (r *CatalogReconciler) Stats() ReconcilerStats {
	return ReconcilerStats{
		Passes: r.passes.Load(), Failures: r.failures.Load(),
		Tracked: r.nTracked.Load(), Converged: r.nConverged.Load(), Stopped: r.stopped.Load(),
	}
}
