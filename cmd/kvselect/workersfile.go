package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// The --workers-file discovery source (kvselect's own; Dynamo names "a
// workers file" only as an example of a source, in ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/membership.rs). The file is the
// complete desired membership, {"workers": [POST /workers bodies]}
// (httpapi.DecodeWorkersFile); the source turns its versions into
// snapshots for a core.CatalogReconciler, and serve owns the goroutine that
// polls it (watch).

const (
	// workersFilePoll is how often serve polls the file.
	workersFilePoll = time.Second
	// maxWorkersFileBytes bounds the file: a larger one is invalid. 16 MiB
	// is some 30,000 workers of full records (kvselect_workers_file_max_bytes).
	maxWorkersFileBytes = 16 << 20
	// racyWindow: a file modified this close to the moment it was read may
	// change again without changing its size or modification time (file
	// systems stamp times at a coarse granularity), so it is read again on
	// the next poll (git's "racily clean" rule); the content hash keeps a
	// re-read from emitting the same snapshot twice.
	racyWindow = 2 * time.Second
)

// workersFile is a core.CatalogSource over a JSON file.
//
// A poll opens the path (which follows symlinks, so a Kubernetes ConfigMap
// whose ..data link is retargeted, or a file replaced by an atomic rename,
// is seen as a new file), stats the open file, and reads it only when its
// identity (device and inode), size or modification time changed since the
// last read, or that read was racy. A version that parses is emitted only
// when its SHA-256 differs from the last emitted one. A version that does
// not (missing, unreadable, too large, not JSON, an entry without
// worker_id, a duplicate worker_id) emits nothing, so the catalog keeps
// the last good membership; it is logged and counted once per distinct
// error, and the next change is tried again.
type workersFile struct {
	path     string
	maxBytes int64
	logf     func(string, ...any)
	// wall is the time of a read, compared with the file's modification
	// time (the file system's clock, not a schedule): time.Now.
	wall func() time.Time

	// snaps holds at most one snapshot nobody has taken yet; a newer one
	// replaces it (snapshots are complete, so an older one is worthless).
	// Only the polling goroutine sends on it, and closes it (failClosed).
	snaps chan []core.WorkerSpec

	// Owned by the polling goroutine (the constructor before it starts):
	// last is the file read last, racy whether that read was racy, sum the
	// hash of the version emitted last, lastErr the error reported last
	// ("" while the file is valid).
	last    os.FileInfo
	racy    bool
	sum     [sha256.Size]byte
	lastErr string

	st struct {
		polls, reads, snapshots, invalid atomic.Uint64
		workers                          atomic.Int64
		valid, stopped                   atomic.Bool
	}
}

// openWorkersFile reads and parses the file now (a missing, unreadable or
// invalid file is an error) and queues its membership as the first
// snapshot, so the host can apply it before serving.
func openWorkersFile(path string, maxBytes int64, logf func(string, ...any)) (*workersFile, error) {
	f := &workersFile{path: path, maxBytes: maxBytes, logf: logf, wall: time.Now, snaps: make(chan []core.WorkerSpec, 1)}
	specs, changed, err := f.read()
	if err != nil {
		return nil, err
	}
	if !changed {
		panic("BUG: the first read of a workers file is unchanged")
	}
	f.emit(specs)
	f.st.valid.Store(true)
	return f, nil
}

// Snapshots implements core.CatalogSource.
func (f *workersFile) Snapshots() <-chan []core.WorkerSpec { return f.snaps }

// poll checks the file once (the polling goroutine's step).
func (f *workersFile) poll() {
	f.st.polls.Add(1)
	specs, changed, err := f.read()
	switch {
	case err != nil:
		f.st.valid.Store(false)
		if msg := err.Error(); msg != f.lastErr {
			f.lastErr = msg
			f.st.invalid.Add(1)
			f.logf("warning: %v; keeping the last valid membership (%d workers)", err, f.st.workers.Load())
		}
	case changed:
		f.emit(specs)
		fallthrough
	default:
		if f.lastErr != "" {
			f.logf("workers file %s is valid again", f.path)
		}
		f.lastErr = ""
		f.st.valid.Store(true)
	}
}

// read returns the file's membership when it is a new version: changed is
// false, with no error, when the file is as last read or its content is
// the version emitted last.
func (f *workersFile) read() (specs []core.WorkerSpec, changed bool, err error) {
	fh, err := os.Open(f.path)
	if err != nil {
		f.last = nil
		return nil, false, fmt.Errorf("workers file: %w", err) // the error names the path
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		f.last = nil
		return nil, false, fmt.Errorf("workers file: %w", err)
	}
	if l := f.last; l != nil && !f.racy && os.SameFile(fi, l) && fi.Size() == l.Size() && fi.ModTime().Equal(l.ModTime()) {
		return nil, false, nil
	}
	f.st.reads.Add(1)
	readAt := f.wall()
	b, err := io.ReadAll(io.LimitReader(fh, f.maxBytes+1))
	if err != nil {
		f.last = nil
		return nil, false, fmt.Errorf("workers file %s: %w", f.path, err)
	}
	f.last, f.racy = fi, !fi.ModTime().Before(readAt.Add(-racyWindow))
	if int64(len(b)) > f.maxBytes {
		return nil, false, fmt.Errorf("workers file %s is larger than %d bytes", f.path, f.maxBytes)
	}
	specs, err = httpapi.DecodeWorkersFile(b)
	if err != nil {
		return nil, false, fmt.Errorf("workers file %s: %w", f.path, err)
	}
	sum := sha256.Sum256(b)
	if f.st.snapshots.Load() > 0 && sum == f.sum {
		return nil, false, nil
	}
	f.sum = sum
	return specs, true, nil
}

// emit queues a snapshot, replacing one nobody has taken yet.
func (f *workersFile) emit(specs []core.WorkerSpec) {
	for {
		select {
		case f.snaps <- specs:
			f.st.snapshots.Add(1)
			f.st.workers.Store(int64(len(specs)))
			return
		default:
		}
		select {
		case <-f.snaps: // superseded
		default:
		}
	}
}

// watch polls the file on every tick until ctx ends (shutdown: the catalog
// keeps its state). If it stops for any other reason (ticks closed, a
// panic), the source fails closed: one empty snapshot, then the channel
// closes, as Dynamo's Kubernetes sources do when their watch ends
// (ishandhanani/dynamo:deploy/inference-gateway/ext-proc/src/
// topology_adapter.rs).
func (f *workersFile) watch(ctx context.Context, ticks <-chan time.Time) {
	defer func() {
		if ctx.Err() == nil {
			f.failClosed()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ticks:
			if !ok {
				return
			}
			f.poll()
		}
	}
}

// failClosed sends an empty membership and closes the source.
func (f *workersFile) failClosed() {
	f.logf("warning: workers file %s is no longer watched; clearing the workers it listed", f.path)
	f.st.stopped.Store(true)
	f.emit([]core.WorkerSpec{})
	close(f.snaps)
}

// workersFileStats is a snapshot for metrics.
type workersFileStats struct {
	Polls, Reads, Snapshots, Invalid uint64
	// Workers is the size of the last snapshot emitted.
	Workers        int64
	Valid, Stopped bool
	MaxBytes       int64
}

func (f *workersFile) stats() workersFileStats {
	return workersFileStats{
		Polls: f.st.polls.Load(), Reads: f.st.reads.Load(), Snapshots: f.st.snapshots.Load(), Invalid: f.st.invalid.Load(),
		Workers: f.st.workers.Load(), Valid: f.st.valid.Load(), Stopped: f.st.stopped.Load(), MaxBytes: f.maxBytes,
	}
}

// membership is the --workers-file source and the reconciler that applies
// it, as serve runs them: two goroutines, the poll loop (watch) and the
// reconciler (core.CatalogReconciler.Run).
type membership struct {
	file   *workersFile
	rec    *core.CatalogReconciler
	logf   func(string, ...any)
	cancel context.CancelFunc
	done   chan struct{}
}

// openMembership reads the file, takes the catalog's ownership and applies
// the first version before returning (a pass that fails is retried 5 s
// after Run starts; its reason is logged). An invalid file is an error.
func openMembership(svc *core.Service, path string, logf func(string, ...any)) (*membership, error) {
	f, err := openWorkersFile(path, maxWorkersFileBytes, logf)
	if err != nil {
		return nil, err
	}
	rec, err := core.NewCatalogReconciler(svc, core.ReconcilerConfig{
		Name: "--workers-file", Exclusive: true,
		Logf: func(format string, args ...any) { logf("workers file: "+format, args...) },
	})
	if err != nil {
		return nil, err
	}
	first := <-f.Snapshots()
	_ = rec.Offer(first, time.Now())
	logf("workers file %s: %d workers; it owns the catalog (POST, PATCH and DELETE /workers answer 409)", path, len(first))
	return &membership{file: f, rec: rec, logf: logf}, nil
}

// start runs the poll loop on ticks and the reconciler.
func (m *membership) start(ticks <-chan time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.file.watch(ctx, ticks)
	}()
	go func() {
		defer close(m.done)
		if err := m.rec.Run(ctx, m.file); err != nil {
			m.logf("workers file: clearing the catalog: %v", err)
		}
		<-watched
	}()
}

// stop ends both goroutines, keeping the catalog as it is, and gives the
// catalog's ownership back.
func (m *membership) stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
	m.rec.Close()
}
