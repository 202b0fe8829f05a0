package natsplane

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker catalog in a JetStream key-value bucket, so that replicas
// need not be given the same catalog by hand. One key per worker,
// w.{worker_id}, whose value is the JSON of its core.WorkerSpec (the POST
// /workers body; a format of kvselect's, Dynamo has no such bucket).
//
//   - Every replica watches the bucket (Start): Snapshots is a
//     core.CatalogSource of the bucket's whole membership, one snapshot
//     after the initial values and one per change, the newest replacing
//     one not yet taken (a snapshot is complete, so skipping one loses
//     nothing). A host that has no discovery source of its own reconciles
//     its catalog from it.
//   - The replica that has the discovery source (a workers file,
//     Kubernetes) mirrors it (Mirror): the writer goroutine makes the
//     bucket equal to the newest desired membership with compare-and-swap
//     writes against the revisions the watcher saw (Create of a new key,
//     Update and Delete at the last revision), so a concurrent writer is
//     never overwritten blindly: its write fails (Conflicts), the watcher
//     delivers the newer value, and the next pass decides again. Foreign
//     writes are undone: the source stays authoritative.
//
// Bounds: at most MaxWorkers keys are held (more are dropped, counted),
// values over MaxValueBytes and undecodable ones are dropped (counted,
// logged at a limited rate), keys outside w.{id} likewise.
type CatalogConfig struct {
	// Bucket names the bucket; default kvselect-catalog-{ns}-{component}
	// from Scope (characters outside [A-Za-z0-9_-] as _).
	Bucket string
	Scope  Scope
	// Replicas is the bucket's JetStream replication (1..5); default 1.
	Replicas int
	// MaxWorkers bounds the keys held; default 4096 (core's
	// MaxListeners default).
	MaxWorkers int
	// MaxValueBytes bounds one value; default 64 KiB.
	MaxValueBytes int
	// RetryDelay is how long a mirror pass that failed waits before it
	// runs again; default 1 s.
	RetryDelay time.Duration
	// Logger as IngressConfig's.
	Logger *slog.Logger
}

// CatalogStats are a Catalog's counters (gauges say so).
type CatalogStats struct {
	Bound      bool   // the bucket is bound (gauge)
	BindErrors uint64 // failed attempts to bind it
	Workers    int    // keys held (gauge)
	MaxWorkers int    // CatalogConfig.MaxWorkers
	Updates    uint64 // watched puts and deletes applied
	Snapshots  uint64 // snapshots offered
	Dropped    uint64 // entries dropped: bad key, too large, undecodable, past MaxWorkers
	// Mirror side.
	Passes, Writes, Deletes, Conflicts, Errors uint64
	WatchRestarts                              uint64
}

// Catalog is the bucket's watcher and, with Mirror, its writer.
type Catalog struct {
	cfg    CatalogConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kv is set once by bind, before watch and write start (read by
	// them without the lock).
	kv    jetstream.KeyValue
	bound atomic.Bool

	snaps chan []core.WorkerSpec // capacity 1; only the watcher sends
	// kick wakes the writer (capacity 1).
	kick chan struct{}

	// mu owns the watched state and the newest desired membership.
	mu struct {
		sync.Mutex
		seen    map[string]seenEntry // key -> value and revision, as watched
		want    map[string][]byte    // key -> value; nil: no Mirror yet
		mirrors bool
		lg      ratelog.Logger
	}
	st struct {
		updates, snapshots, dropped                        atomic.Uint64
		passes, writes, deletes, conflicts, errs, restarts atomic.Uint64
		bindErrors                                         atomic.Uint64
	}
}

type seenEntry struct {
	val []byte
	rev uint64
}

// NewCatalog checks the configuration; Start binds the bucket.
func NewCatalog(cfg CatalogConfig) (*Catalog, error) {
	if cfg.Bucket == "" {
		if err := cfg.Scope.Validate(); err != nil {
			return nil, err
		}
		cfg.Bucket = "kvselect-catalog-" + bucketSlug(cfg.Scope.Namespace) + "-" + bucketSlug(cfg.Scope.Component)
	}
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, 4096)
	cfg.MaxValueBytes = cmp.Or(cfg.MaxValueBytes, 64<<10)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, time.Second)
	if cfg.Replicas < 1 || cfg.Replicas > 5 || cfg.MaxWorkers < 0 || cfg.MaxValueBytes < 0 {
		return nil, fmt.Errorf("%w: catalog bucket replicas 1..5 and non-negative bounds", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Catalog{cfg: cfg, snaps: make(chan []core.WorkerSpec, 1), kick: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.seen = map[string]seenEntry{}
	c.mu.lg = ratelog.Logger{Log: cfg.Logger, Burst: logBurst, Every: logEvery}
	return c, nil
}

func bucketSlug(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

// Bucket is the bucket's name.
func (c *Catalog) Bucket() string { return c.cfg.Bucket }

// Start binds the bucket on nc's JetStream (creating it when missing) and
// then watches it, on goroutines of its own: it returns at once. Binding
// is retried every RetryDelay until it succeeds or Close: a clustered
// JetStream elects its leader only once a majority of the members are
// up, and nothing of serving waits for it.
func (c *Catalog) Start(nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natsplane: JetStream: %w", err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if !c.bind(js) {
			close(c.snaps)
			return
		}
		c.wg.Add(1)
		go c.write()
		c.watch()
	}()
	return nil
}

// bind creates or binds the bucket, retrying until Close.
func (c *Catalog) bind(js jetstream.JetStream) bool {
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: c.cfg.Bucket, History: 1, Replicas: c.cfg.Replicas, MaxValueSize: int32(c.cfg.MaxValueBytes)})
		cancel()
		if err == nil {
			c.mu.Lock()
			c.kv = kv
			c.mu.Unlock()
			c.bound.Store(true)
			c.cfg.Logger.Info("worker catalog: watching the JetStream bucket", "bucket", c.cfg.Bucket, "replicas", c.cfg.Replicas)
			return true
		}
		c.st.bindErrors.Add(1)
		c.mu.Lock()
		c.mu.lg.LogAt(slog.LevelWarn, "worker catalog: JetStream bucket not available yet; retrying", "bucket", c.cfg.Bucket, "err", err)
		c.mu.Unlock()
		select {
		case <-c.ctx.Done():
			return false
		case <-time.After(c.cfg.RetryDelay):
		}
	}
}

// Snapshots implements core.CatalogSource; the channel closes on Close.
func (c *Catalog) Snapshots() <-chan []core.WorkerSpec { return c.snaps }

// watch follows the bucket until Close, restarting the watch when it
// ends (a reconnect, a leader change).
func (c *Catalog) watch() {
	defer close(c.snaps)
	for c.ctx.Err() == nil {
		w, err := c.kv.WatchAll(c.ctx)
		if err != nil {
			c.st.restarts.Add(1)
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(c.cfg.RetryDelay):
			}
			continue
		}
		// A restarted watch replays the bucket's current values: start
		// from nothing, so keys deleted meanwhile go.
		fresh := map[string]seenEntry{}
		initial := true
		for e := range w.Updates() {
			if e == nil { // the initial values are in
				initial = false
				c.replace(fresh)
				continue
			}
			if initial {
				c.mu.Lock()
				c.apply(fresh, e)
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			c.apply(c.mu.seen, e)
			c.mu.Unlock()
			c.offer()
		}
		_ = w.Stop()
		if c.ctx.Err() == nil {
			c.st.restarts.Add(1)
		}
	}
}

// apply records one watched entry in m; c.mu held.
func (c *Catalog) apply(m map[string]seenEntry, e jetstream.KeyValueEntry) {
	c.st.updates.Add(1)
	key := e.Key()
	if _, ok := workerKeyID(key); !ok {
		c.drop("key outside w.{worker_id}", key)
		return
	}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		delete(m, key)
		return
	}
	if _, ok := m[key]; !ok && len(m) >= c.cfg.MaxWorkers {
		c.drop("past the catalog's worker bound", key)
		return
	}
	m[key] = seenEntry{val: bytes.Clone(e.Value()), rev: e.Revision()}
}

// drop counts and logs a dropped entry; c.mu held (it owns the logger).
func (c *Catalog) drop(why, key string) {
	c.st.dropped.Add(1)
	c.mu.lg.LogAt(slog.LevelWarn, "worker catalog: bucket entry dropped", "why", why, "key", key)
}

// replace installs a restarted watch's initial state and offers it.
func (c *Catalog) replace(m map[string]seenEntry) {
	c.mu.Lock()
	c.mu.seen = m
	c.mu.Unlock()
	c.offer()
}

// offer sends the watched membership, replacing one not yet taken, and
// wakes the writer (a foreign write is to be undone).
func (c *Catalog) offer() {
	c.mu.Lock()
	specs := make([]core.WorkerSpec, 0, len(c.mu.seen))
	for _, k := range slices.Sorted(maps.Keys(c.mu.seen)) {
		var s core.WorkerSpec
		id, _ := workerKeyID(k)
		if err := json.Unmarshal(c.mu.seen[k].val, &s); err != nil || s.WorkerID != id {
			c.st.dropped.Add(1)
			c.mu.lg.LogAt(slog.LevelWarn, "worker catalog: undecodable worker dropped", "key", k, "err", err)
			continue
		}
		specs = append(specs, s)
	}
	c.mu.Unlock()
	select {
	case <-c.snaps:
	default:
	}
	c.snaps <- specs
	c.st.snapshots.Add(1)
	c.wake()
}

func (c *Catalog) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func workerKey(id uint64) string { return "w." + strconv.FormatUint(id, 10) }

func workerKeyID(key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, "w.")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && strconv.FormatUint(id, 10) == s
}

// Mirror makes specs, the discovery source's whole membership, what the
// bucket is to hold: the writer goroutine converges the bucket to it
// (compare-and-swap), now and after every foreign change, until Close.
// It never waits for the bus. The newest call wins.
func (c *Catalog) Mirror(specs []core.WorkerSpec) error {
	want := make(map[string][]byte, len(specs))
	for i := range specs {
		b, err := json.Marshal(&specs[i])
		if err != nil {
			return err
		}
		if len(b) > c.cfg.MaxValueBytes {
			return fmt.Errorf("%w: worker %d is %d bytes, over the catalog's %d", ErrConfig, specs[i].WorkerID, len(b), c.cfg.MaxValueBytes)
		}
		want[workerKey(specs[i].WorkerID)] = b
	}
	c.mu.Lock()
	c.mu.want, c.mu.mirrors = want, true
	c.mu.Unlock()
	c.wake()
	return nil
}

// write runs mirror passes when woken, and again RetryDelay after a pass
// that failed, until Close.
func (c *Catalog) write() {
	defer c.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-retry:
		}
		retry = nil
		if !c.pass() {
			retry = time.After(c.cfg.RetryDelay)
		}
	}
}

// pass writes what differs between the desired and the watched
// membership, each write conditional on the watched revision; it reports
// whether every write went through.
func (c *Catalog) pass() bool {
	c.mu.Lock()
	if !c.mu.mirrors {
		c.mu.Unlock()
		return true
	}
	want, seen := c.mu.want, maps.Clone(c.mu.seen)
	c.mu.Unlock()
	c.st.passes.Add(1)
	ok := true
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	note := func(err error) {
		if err == nil {
			return
		}
		ok = false
		var apiErr *jetstream.APIError
		if errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			c.st.conflicts.Add(1) // another writer was first; the watcher will tell
			return
		}
		c.st.errs.Add(1)
		c.mu.Lock()
		c.mu.lg.LogAt(slog.LevelWarn, "worker catalog: bucket write failed; retrying", "err", err)
		c.mu.Unlock()
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v := want[k]
		cur, has := seen[k]
		if has && bytes.Equal(cur.val, v) {
			continue
		}
		var err error
		if has {
			_, err = c.kv.Update(ctx, k, v, cur.rev)
		} else {
			_, err = c.kv.Create(ctx, k, v)
		}
		if err == nil {
			c.st.writes.Add(1)
		}
		note(err)
	}
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		if _, keep := want[k]; keep {
			continue
		}
		err := c.kv.Delete(ctx, k, jetstream.LastRevision(seen[k].rev))
		if err == nil {
			c.st.deletes.Add(1)
		}
		note(err)
	}
	return ok
}

// Stats returns the counters.
func (c *Catalog) Stats() CatalogStats {
	c.mu.Lock()
	n := len(c.mu.seen)
	c.mu.Unlock()
	return CatalogStats{
		Bound: c.bound.Load(), BindErrors: c.st.bindErrors.Load(), Workers: n, MaxWorkers: c.cfg.MaxWorkers,
		Updates: c.st.updates.Load(), Snapshots: c.st.snapshots.Load(), Dropped: c.st.dropped.Load(),
		Passes: c.st.passes.Load(), Writes: c.st.writes.Load(), Deletes: c.st.deletes.Load(),
		Conflicts: c.st.conflicts.Load(), Errors: c.st.errs.Load(), WatchRestarts: c.st.restarts.Load(),
	}
}

// Close stops the watcher and the writer; Snapshots' channel closes. The
// bucket keeps its state.
func (c *Catalog) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}
