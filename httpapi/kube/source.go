package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvselect/kvselect/core"
)

// PoolResource is the InferencePool resource the source watches, read
// through the dynamic client (no generated types).
var PoolResource = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Source is a core.CatalogSource over the Kubernetes API: informers on
// the pods of one namespace and, in pool mode, on one InferencePool (or
// two, a decode and a prefill pool); every change becomes, after
// Config.Debounce, the complete membership.
type Source struct {
	cfg Config
	ns  string
	log *slog.Logger
	rec *core.CatalogReconciler

	podFactory informers.SharedInformerFactory
	pods       cache.SharedIndexInformer
	// pools are the watched InferencePools in priority order: the pool
	// (the decode pool of a pair), then the prefill pool; none in
	// selector mode.
	pools []*poolWatch
	// fixed is the target in selector mode; nil in pool mode.
	fixed *target

	// kick holds one pending change notice (informer handlers send,
	// never block); snaps at most one snapshot nobody took yet, replaced
	// by a newer one (snapshots are complete). Only Run's goroutine
	// receives from kick and sends on snaps; snaps is never closed (see
	// Run).
	kick  chan struct{}
	snaps chan []core.WorkerSpec
	after func(time.Duration) <-chan time.Time

	// Owned by Run's goroutine: last is the JSON of the membership sent
	// last (nil before the first).
	last []byte

	started atomic.Bool
	st      struct {
		synced, poolResolved                        atomic.Bool
		seen, matched, workers, ignoredPorts, both  atomic.Int64
		events, builds, snapshots                   atomic.Uint64
		watchErrors, poolErrors, collisions, errsAt atomic.Int64
	}
	mu struct {
		sync.Mutex
		lastErr string // guarded by mu
	}
}

// New returns a source that is not started: it reads the kubeconfig (or
// the in-cluster configuration) and builds the clients and informers, but
// opens no connection until Run. rec, when not nil, is run by Run on this
// source (the usual host wiring); nil leaves Snapshots to the caller.
func New(cfg Config, rec *core.CatalogReconciler, log *slog.Logger) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rules := &clientcmd.ClientConfigLoadingRules{}
	switch paths := filepath.SplitList(cfg.Kubeconfig); len(paths) {
	case 0:
	case 1:
		rules.ExplicitPath = paths[0]
	default:
		rules.Precedence = paths
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		if cfg.Kubeconfig == "" {
			return nil, fmt.Errorf("kube: no --kubeconfig and no in-cluster configuration: %w", err)
		}
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	ns := cfg.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("kube: namespace: %w", err)
		}
	}
	return newSource(cfg, rc, ns, rec, log)
}

func newSource(cfg Config, rc *rest.Config, ns string, rec *core.CatalogReconciler, log *slog.Logger) (*Source, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "kvselect-discovery"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	s := &Source{
		cfg: cfg, ns: ns, log: log.With("source", "kubernetes", "namespace", ns), rec: rec,
		kick: make(chan struct{}, 1), snaps: make(chan []core.WorkerSpec, 1), after: time.After,
	}
	opts := []informers.SharedInformerOption{informers.WithNamespace(ns)}
	if cfg.Selector != "" {
		// Selector mode: the API server filters (the selector is fixed).
		sel, _ := labels.Parse(cfg.Selector) // validated
		s.fixed = &target{selector: sel, port: cfg.TargetPorts[0], extraPorts: len(cfg.TargetPorts) - 1}
		opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cfg.Selector }))
	}
	// Pool mode watches every pod of the namespace and decides membership
	// in memory, so a selector change needs no new watch (as Dynamo's
	// namespace-wide reflector and llm-d's pod controller do).
	s.podFactory = informers.NewSharedInformerFactoryWithOptions(cs, cfg.Resync, opts...)
	s.pods = s.podFactory.Core().V1().Pods().Informer()
	if err := s.watch(s.pods, "pods"); err != nil {
		return nil, err
	}
	if cfg.PoolName != "" {
		dc, err := dynamic.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
		s.pools = append(s.pools, &poolWatch{name: cfg.PoolName})
		if cfg.PrefillPoolName != "" {
			pre, dec := cfg.groups()
			s.pools[0].group = dec
			s.pools = append(s.pools, &poolWatch{name: cfg.PrefillPoolName, group: pre})
		}
		// One informer per pool, each listing its pool alone by name (a
		// field selector has one name): the prefill pool gets a reflector
		// of its own, as in Dynamo.
		for _, pw := range s.pools {
			name := fields.OneTermEqualSelector("metadata.name", pw.name).String()
			pw.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, cfg.Resync, ns, func(o *metav1.ListOptions) { o.FieldSelector = name })
			pw.inf = pw.factory.ForResource(PoolResource).Informer()
			if err := s.watch(pw.inf, "inferencepools"); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// poolWatch is one watched InferencePool.
type poolWatch struct {
	name string
	// group is the routing group of its workers in a disaggregated pair;
	// "" for a lone pool (the role label's or Config.RoutingGroup).
	group   string
	factory dynamicinformer.DynamicSharedInformerFactory
	inf     cache.SharedIndexInformer
	// resolved: the pool exists with a usable spec (last build).
	resolved atomic.Bool
	// workers of the last build, and ignored target ports.
	workers, ignoredPorts atomic.Int64
	// lastTarget is the description logged last (Run's goroutine).
	lastTarget string
}

// watch installs the change handler and the watch-error handler of inf.
func (s *Source) watch(inf cache.SharedIndexInformer, what string) error {
	changed := func() {
		s.st.events.Add(1)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return fmt.Errorf("kube: %s informer: %w", what, err)
	}
	return inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.st.watchErrors.Add(1)
		s.setErr(fmt.Errorf("%s watch: %w", what, err))
		// An expired resource version (a compacted or restarted API
		// server) and a dropped connection are routine: the reflector
		// relists and the membership converges.
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, context.Canceled) {
			s.log.Info("watch ended; relisting", "resource", what, "err", err)
			return
		}
		s.log.Warn("watch failed; retrying with backoff", "resource", what, "err", err)
	})
}

// Snapshots implements core.CatalogSource. The first snapshot is sent once
// the informers have synced (the current membership; before that the
// catalog is left as it is), then one per change after the debounce
// window, and only when the membership differs from the last one sent.
// The channel is never closed: the informers retry for ever, and a
// shutdown (Run's context) keeps the catalog.
func (s *Source) Snapshots() <-chan []core.WorkerSpec { return s.snaps }

// Run starts the informers, waits for their first lists, and turns
// changes into snapshots until ctx ends; with a reconciler (New), it runs
// the reconciler on the source as well. It returns once every goroutine it
// started has stopped: nil when ctx ended. Run may be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		panic("BUG: kube.Source.Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if s.rec != nil {
		wg.Go(func() {
			if err := s.rec.Run(ctx, s); err != nil {
				s.log.Warn("catalog reconciler stopped", "err", err)
			}
		})
	}
	s.podFactory.Start(ctx.Done())
	synced := []cache.InformerSynced{s.pods.HasSynced}
	for _, pw := range s.pools {
		pw.factory.Start(ctx.Done())
		synced = append(synced, pw.inf.HasSynced)
	}
	defer func() {
		cancel()
		s.podFactory.Shutdown()
		for _, pw := range s.pools {
			pw.factory.Shutdown()
		}
		wg.Wait()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended first
	}
	s.st.synced.Store(true)
	s.log.Info("pods and pools listed; discovery running", "pool", s.cfg.PoolName, "prefill_pool", s.cfg.PrefillPoolName, "selector", s.cfg.Selector)
	s.build()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			if debounce == nil {
				debounce = s.after(s.cfg.Debounce)
			}
		case <-debounce:
			debounce = nil
			s.build()
		}
	}
}

// Ready reports whether the membership is known: the informers have
// synced and, in pool mode, every pool (both of a disaggregated pair)
// exists with a usable spec. (An empty membership can be ready: a pool
// without Ready pods.)
func (s *Source) Ready() bool {
	return s.st.synced.Load() && (s.fixed != nil || s.st.poolResolved.Load())
}

// target returns what pw selects now: its spec from the informer's cache
// (an error when the pool is absent or unusable: it then selects nothing,
// as in Dynamo's inference_pool.rs, ai-dynamo/dynamo:deploy/
// inference-gateway/ext-proc/src/).
func (s *Source) target(pw *poolWatch) (*target, error) {
	obj, ok, err := pw.inf.GetStore().GetByKey(s.ns + "/" + pw.name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("InferencePool %s/%s not found", s.ns, pw.name)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("BUG: InferencePool cache holds %T", obj)
	}
	t, err := parsePool(u)
	if err != nil {
		return nil, err
	}
	t.group = pw.group
	return &t, nil
}

// targets returns the targets in priority order, nil for a pool that is
// absent or unusable, and whether all are usable; it logs (and counts) a
// pool's change of state.
func (s *Source) targets() ([]*target, bool) {
	if s.fixed != nil {
		s.st.ignoredPorts.Store(int64(s.fixed.extraPorts))
		return []*target{s.fixed}, true
	}
	ts := make([]*target, len(s.pools))
	all := true
	ignored := int64(0)
	for i, pw := range s.pools {
		t, terr := s.target(pw)
		var desc string
		if terr != nil {
			desc = "unusable: " + terr.Error()
			all = false
		} else {
			ts[i] = t
			desc = fmt.Sprintf("selector %q, port %d, %d more target ports ignored", t.selector.String(), t.port, t.extraPorts)
			ignored += int64(t.extraPorts)
		}
		pw.resolved.Store(terr == nil)
		if desc == pw.lastTarget {
			continue
		}
		pw.lastTarget = desc
		if terr != nil {
			s.st.poolErrors.Add(1)
			s.setErr(terr)
			s.log.Warn("no usable InferencePool; it selects no worker until there is one", "pool", pw.name, "err", terr)
		} else {
			s.log.Info("workers selected", "pool", pw.name, "routing_group", pw.group, "selector", t.selector.String(), "target_port", t.port, "ignored_target_ports", t.extraPorts)
		}
	}
	s.st.ignoredPorts.Store(ignored)
	return ts, all
}

// build computes the membership from the caches and sends it when it
// changed (Run's goroutine).
func (s *Source) build() {
	s.st.builds.Add(1)
	ts, all := s.targets()
	s.st.poolResolved.Store(all)
	objs := s.pods.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	specs, per, matched, collided, both := s.cfg.membership(pods, ts...)
	for i, pw := range s.pools {
		pw.workers.Store(int64(per[i]))
	}
	s.st.seen.Store(int64(len(pods)))
	s.st.matched.Store(int64(matched))
	if collided > 0 {
		s.st.collisions.Add(int64(collided))
		s.setErr(fmt.Errorf("%d pods left out: their worker id collides with another pod's", collided))
		s.log.Warn("pods left out: worker id collision", "pods", collided)
	}
	if prev := s.st.both.Swap(int64(both)); both > 0 && int64(both) != prev {
		s.log.Warn("pods selected by both pools are decode workers only", "pods", both, "decode_pool", s.cfg.PoolName, "prefill_pool", s.cfg.PrefillPoolName)
	}
	b, err := json.Marshal(specs)
	if err != nil {
		panic("BUG: a membership does not marshal: " + err.Error())
	}
	if s.last != nil && bytes.Equal(b, s.last) {
		return
	}
	s.last = b
	s.st.workers.Store(int64(len(specs)))
	s.log.Info("membership changed", "workers", len(specs), "pods_matched", matched, "pods_seen", len(pods))
	s.emit(specs)
}

// emit queues a snapshot, replacing one nobody has taken yet. It is
// counted first, so that a reader who sees the catalog apply it also sees
// the count.
func (s *Source) emit(specs []core.WorkerSpec) {
	s.st.snapshots.Add(1)
	for {
		select {
		case s.snaps <- specs:
			return
		default:
		}
		select {
		case <-s.snaps: // superseded
		default:
		}
	}
}

func (s *Source) setErr(err error) {
	s.mu.Lock()
	s.mu.lastErr = err.Error()
	s.mu.Unlock()
	s.st.errsAt.Store(time.Now().Unix())
}

// Stats is a cheap snapshot of the source for metrics.
type Stats struct {
	// Synced: the informers have listed; PoolResolved: the target is
	// usable (always, in selector mode, once synced).
	Synced, PoolResolved bool
	// PodsSeen are the pods in the cache (the namespace's in pool mode,
	// the selector's otherwise), PodsMatched those a target selects,
	// PodsReady the workers of the last membership (Ready, not
	// terminating, with an IP), PodsInBothPools the pods both pools of a
	// pair select (decode workers only).
	PodsSeen, PodsMatched, PodsReady, PodsInBothPools int64
	// Pools are the InferencePools, in priority order (the decode pool
	// first); none in selector mode.
	Pools []PoolStats
	// IgnoredTargetPorts are the target ports past the first.
	IgnoredTargetPorts int64
	// Events are informer notifications, Builds memberships computed,
	// Snapshots those sent (changed ones).
	Events, Builds, Snapshots uint64
	// WatchErrors, PoolErrors (a pool missing or unusable, counted per
	// change) and Collisions (pods left out for a colliding id).
	WatchErrors, PoolErrors, Collisions int64
	// LastError is the text of the latest error, LastErrorUnix its time
	// (0: none).
	LastError     string
	LastErrorUnix int64
	// Reconciler is the reconciler's, when the source runs one.
	Reconciler    core.ReconcilerStats
	HasReconciler bool
}

// PoolStats is one InferencePool's part of Stats.
type PoolStats struct {
	// Name is the pool's, RoutingGroup its workers' ("" for a lone pool:
	// the role label's or the configured group).
	Name, RoutingGroup string
	// Resolved: the pool exists with a usable spec; Workers: its workers
	// in the last membership.
	Resolved bool
	Workers  int64
}

// Stats returns the counters; safe from any goroutine.
func (s *Source) Stats() Stats {
	st := Stats{
		Synced: s.st.synced.Load(), PoolResolved: s.Ready(),
		PodsSeen: s.st.seen.Load(), PodsMatched: s.st.matched.Load(), PodsReady: s.st.workers.Load(), PodsInBothPools: s.st.both.Load(),
		IgnoredTargetPorts: s.st.ignoredPorts.Load(),
		Events:             s.st.events.Load(), Builds: s.st.builds.Load(), Snapshots: s.st.snapshots.Load(),
		WatchErrors: s.st.watchErrors.Load(), PoolErrors: s.st.poolErrors.Load(), Collisions: s.st.collisions.Load(),
		LastErrorUnix: s.st.errsAt.Load(),
	}
	for _, pw := range s.pools {
		st.Pools = append(st.Pools, PoolStats{Name: pw.name, RoutingGroup: pw.group, Resolved: pw.resolved.Load(), Workers: pw.workers.Load()})
	}
	s.mu.Lock()
	st.LastError = s.mu.lastErr
	s.mu.Unlock()
	if s.rec != nil {
		st.Reconciler, st.HasReconciler = s.rec.Stats(), true
	}
	return st
}
