package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// Tests of the --workers-file source with real files in t.TempDir(). Polls
// are explicit calls (poll) or ticks the test sends (watch); nothing
// sleeps.

// fileEnv is a service whose catalog a workers file owns, driven by hand.
type fileEnv struct {
	t    *testing.T
	path string
	svc  *core.Service
	f    *workersFile
	rec  *core.CatalogReconciler
	logs syncBuf
}

// workerEntry is one file entry: worker id in routing group g.
func workerEntry(id int, g string) string {
	return fmt.Sprintf(`{"worker_id":%d,"model_name":"m","routing_group":%q,"endpoint":"http://w%d:8000","block_size":16}`, id, g, id)
}

func workersJSON(entries ...string) string {
	return `{"workers":[` + strings.Join(entries, ",") + `]}`
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newFileEnv writes content to a file, opens the source on it and applies
// its first snapshot, as serve does.
func newFileEnv(t *testing.T, content string) *fileEnv {
	t.Helper()
	e := &fileEnv{t: t, path: filepath.Join(t.TempDir(), "workers.json")}
	writeFile(t, e.path, content)
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	var err error
	if e.svc, err = core.New(cfg, core.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.f, err = openWorkersFile(e.path, maxWorkersFileBytes, e.logf); err != nil {
		t.Fatal(err)
	}
	if e.rec, err = core.NewCatalogReconciler(e.svc, core.ReconcilerConfig{Name: "--workers-file", Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	e.apply()
	return e
}

func (e *fileEnv) logf(format string, args ...any) { fmt.Fprintf(&e.logs, format+"\n", args...) }

// apply takes the pending snapshot and applies it; it fails the test when
// there is none.
func (e *fileEnv) apply() {
	e.t.Helper()
	select {
	case snap, ok := <-e.f.Snapshots():
		if !ok {
			e.t.Fatal("the source closed")
		}
		if err := e.rec.Offer(snap, time.Now()); err != nil {
			e.t.Fatal(err)
		}
	default:
		e.t.Fatal("no snapshot")
	}
}

// noSnapshot fails the test when a snapshot is pending.
func (e *fileEnv) noSnapshot() {
	e.t.Helper()
	select {
	case snap := <-e.f.Snapshots():
		e.t.Fatalf("unexpected snapshot %+v", snap)
	default:
	}
}

// workers returns "id:group:lifecycle" of every catalog entry, by id.
func (e *fileEnv) workers() string {
	var out []string
	for _, w := range e.svc.ListWorkers("", "") {
		out = append(out, fmt.Sprintf("%d:%s:%s", w.WorkerID, w.RoutingGroup, w.Lifecycle))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func (e *fileEnv) wantWorkers(want string) {
	e.t.Helper()
	if got := e.workers(); got != want {
		e.t.Fatalf("catalog %q, want %q", got, want)
	}
}

// TestWorkersFileStartupErrors: a missing, invalid or too large file, an
// entry without worker_id or a duplicate id fails the start with a message
// naming the file and the fault; serve exits 2 before listening.
func TestWorkersFileStartupErrors(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ content, want string }{
		"missing":   {"", "no such file or directory"},
		"json":      {`{"workers":[{"worker_id":1}`, "invalid JSON: EOF while parsing a list at line 1 column 27"},
		"shape":     {`{"workers":{}}`, "workers: invalid type: map, expected a sequence"},
		"no id":     {workersJSON(`{"endpoint":"http://w"}`), "workers[0]: missing field `worker_id`"},
		"duplicate": {workersJSON(workerEntry(7, "decode"), workerEntry(7, "prefill")), "duplicate worker_id 7"},
		"large":     {workersJSON(strings.Repeat(workerEntry(1, "x")+",", 400) + workerEntry(2, "x")), "is larger than 16384 bytes"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if tc.content != "" {
			writeFile(t, path, tc.content)
		}
		_, err := openWorkersFile(path, 16<<10, func(string, ...any) {})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want the path and %q", name, err, tc.want)
		}
	}
	var logs syncBuf
	ready := make(chan string, 1)
	code := serve(context.Background(), []string{"--host", "127.0.0.1", "--port", "0", "--workers-file", filepath.Join(dir, "duplicate.json")},
		envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), &logs, ready)
	if code != 2 || len(ready) != 0 || !strings.Contains(logs.String(), "duplicate worker_id 7") {
		t.Fatalf("serve with an invalid workers file: exit %d, ready %d; logs:\n%s", code, len(ready), logs.String())
	}
}

// TestWorkersFileEdits: a change upserts, a removal deletes, a rewrite of
// the same content emits nothing; an invalid edit (bad JSON, a duplicate
// id, the file gone) keeps the last membership, is logged and counted once
// per distinct error, and the next valid version applies; the public
// catalog mutations are refused while the file owns the catalog.
func TestWorkersFileEdits(t *testing.T) {
	e := newFileEnv(t, workersJSON(workerEntry(1, "prefill"), workerEntry(2, "decode")))
	e.wantWorkers("1:prefill:schedulable 2:decode:schedulable")
	if _, err := e.svc.UpsertWorker(&core.WorkerSpec{WorkerID: 9}); err == nil || err.Error() != "worker catalog is managed by --workers-file" {
		t.Fatalf("public upsert: %v", err)
	}
	if _, err := e.svc.DeleteWorker(1); core.ClassOf(err) != core.ErrConflict {
		t.Fatalf("public delete: %v", err)
	}

	writeFile(t, e.path, workersJSON(workerEntry(1, "prefill"), workerEntry(2, "decode"), workerEntry(3, "decode")))
	e.f.poll()
	e.apply()
	e.wantWorkers("1:prefill:schedulable 2:decode:schedulable 3:decode:schedulable")

	writeFile(t, e.path, workersJSON(workerEntry(2, "decode"), workerEntry(3, "decode")))
	e.f.poll()
	e.apply()
	e.wantWorkers("2:decode:schedulable 3:decode:schedulable")

	// The same content again (a new modification time): read, not emitted.
	good := workersJSON(workerEntry(2, "decode"), workerEntry(3, "decode"))
	writeFile(t, e.path, good)
	e.f.poll()
	e.noSnapshot()

	for i, bad := range []struct{ content, log string }{
		{`{"workers":[` + workerEntry(4, "decode"), "invalid JSON: EOF while parsing a list"},
		{workersJSON(workerEntry(7, "decode"), workerEntry(7, "prefill")), "duplicate worker_id 7; keeping the last valid membership (2 workers)"},
		{"", "no such file or directory"},
	} {
		if bad.content == "" {
			if err := os.Remove(e.path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, e.path, bad.content)
		}
		e.f.poll()
		e.f.poll() // the same fault again: not logged or counted twice
		e.noSnapshot()
		e.wantWorkers("2:decode:schedulable 3:decode:schedulable")
		st := e.f.stats()
		if st.Invalid != uint64(i+1) || st.Valid || strings.Count(e.logs.String(), bad.log) != 1 {
			t.Fatalf("%q: %+v; logs:\n%s", bad.content, st, e.logs.String())
		}
	}
	// Back to the last good content: valid again, nothing to apply.
	writeFile(t, e.path, good)
	e.f.poll()
	e.noSnapshot()
	if !e.f.stats().Valid || !strings.Contains(e.logs.String(), "is valid again") {
		t.Fatalf("%+v; logs:\n%s", e.f.stats(), e.logs.String())
	}
	// An empty membership clears every worker the file introduced.
	writeFile(t, e.path, `{"workers":[]}`)
	e.f.poll()
	e.apply()
	e.wantWorkers("")
	if st := e.f.stats(); st.Snapshots != 4 || st.Workers != 0 || st.Invalid != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// configMap lays out dir as the kubelet mounts a ConfigMap: the data in a
// timestamped directory, "..data" a symlink to it, and each key a symlink
// through "..data". update writes a new timestamped directory and swaps
// "..data" to it with a rename of a fresh symlink (atomic), then removes
// the old directory, as the kubelet's AtomicWriter does
// (kubernetes/kubernetes:pkg/volume/util/atomic_writer.go).
type configMap struct {
	t   *testing.T
	dir string
	gen int
	old string
}

func (c *configMap) update(content string, mtime time.Time) {
	c.t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", c.gen, c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		c.t.Fatal(err)
	}
	file := filepath.Join(c.dir, ts, "workers.json")
	writeFile(c.t, file, content)
	if err := os.Chtimes(file, mtime, mtime); err != nil {
		c.t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.gen == 1 {
		if err := os.Symlink(filepath.Join("..data", "workers.json"), filepath.Join(c.dir, "workers.json")); err != nil {
			c.t.Fatal(err)
		}
	}
	if c.old != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, c.old)); err != nil {
			c.t.Fatal(err)
		}
	}
	c.old = ts
}

// TestWorkersFileConfigMapSwap: a ConfigMap update (the ..data symlink
// retargeted) and an atomic rename over the path are seen even when the
// new file has the same size and modification time as the old one: the
// file's identity changed. The reads are not racy here (the wall clock is
// an hour past the files' times), so only the identity can tell.
func TestWorkersFileConfigMapSwap(t *testing.T) {
	mtime := time.Unix(1_700_000_000, 0)
	cm := &configMap{t: t, dir: t.TempDir()}
	v1 := workersJSON(workerEntry(1, "prefill"), workerEntry(2, "decode"))
	cm.update(v1, mtime)
	path := filepath.Join(cm.dir, "workers.json")
	e := newFileEnv(t, `{"workers":[]}`)
	e.f.path, e.f.wall, e.f.last = path, func() time.Time { return mtime.Add(time.Hour) }, nil
	e.f.poll()
	e.apply()
	e.wantWorkers("1:prefill:schedulable 2:decode:schedulable")
	e.f.poll()
	e.noSnapshot()
	if st := e.f.stats(); st.Reads != 2 {
		t.Fatalf("an unchanged file was read again: %+v", st)
	}

	v2 := strings.Replace(v1, `"routing_group":"decode"`, `"routing_group":"prefill"`, 1)
	v2 = strings.Replace(v2, `"routing_group":"prefill","endpoint":"http://w1`, `"routing_group":"decode","endpoint":"http://w1`, 1)
	if len(v2) != len(v1) || v2 == v1 {
		t.Fatal("v2 must differ from v1 at the same size")
	}
	cm.update(v2, mtime)
	e.f.poll()
	e.apply()
	e.wantWorkers("1:decode:schedulable 2:prefill:schedulable")

	// An atomic rename over a plain file path, same size and time.
	plain := filepath.Join(t.TempDir(), "workers.json")
	writeFile(t, plain, v1)
	if err := os.Chtimes(plain, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	e.f.path, e.f.last = plain, nil
	e.f.poll()
	e.apply()
	e.wantWorkers("1:prefill:schedulable 2:decode:schedulable")
	tmp := plain + ".tmp"
	writeFile(t, tmp, v2)
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, plain); err != nil {
		t.Fatal(err)
	}
	e.f.poll()
	e.apply()
	e.wantWorkers("1:decode:schedulable 2:prefill:schedulable")
}

// TestWorkersFileRacyRewrite: a file rewritten in place with the same size
// and modification time is read again when its last read was racy (the
// modification time within racyWindow of the read).
func TestWorkersFileRacyRewrite(t *testing.T) {
	v1 := workersJSON(workerEntry(1, "prefill"))
	e := newFileEnv(t, v1)
	fi, err := os.Stat(e.path)
	if err != nil {
		t.Fatal(err)
	}
	e.f.wall = func() time.Time { return fi.ModTime() }
	e.f.poll() // unchanged, and racy: read again, not emitted
	e.noSnapshot()
	writeFile(t, e.path, workersJSON(workerEntry(2, "prefill")))
	if err := os.Chtimes(e.path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	e.f.poll()
	e.apply()
	e.wantWorkers("2:prefill:schedulable")
}

// TestWorkersFileWatch: the poll loop on ticks the test sends sees a
// change; when its ticks end (any stop but shutdown) the source fails
// closed, one empty snapshot then the channel closed, and the reconciler's
// Run deletes the file's workers; a shutdown (ctx) keeps the catalog.
func TestWorkersFileWatch(t *testing.T) {
	e := newFileEnv(t, workersJSON(workerEntry(1, "prefill")))
	ticks := make(chan time.Time)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.f.watch(context.Background(), ticks)
	}()
	writeFile(t, e.path, workersJSON(workerEntry(1, "prefill"), workerEntry(2, "decode")))
	ticks <- time.Now()
	snap := <-e.f.Snapshots() // the poll's snapshot
	if err := e.rec.Offer(snap, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.wantWorkers("1:prefill:schedulable 2:decode:schedulable")
	ran := make(chan error, 1)
	go func() { ran <- e.rec.Run(context.Background(), e.f) }()
	close(ticks)
	<-watched
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	e.wantWorkers("")
	if !e.f.stats().Stopped || !e.rec.Stats().Stopped || !strings.Contains(e.logs.String(), "no longer watched") {
		t.Fatalf("%+v %+v; logs:\n%s", e.f.stats(), e.rec.Stats(), e.logs.String())
	}

	// Shutdown: the loop returns, the source stays open, the catalog as
	// it is.
	e = newFileEnv(t, workersJSON(workerEntry(1, "prefill")))
	ctx, cancel := context.WithCancel(context.Background())
	watched = make(chan struct{})
	go func() {
		defer close(watched)
		e.f.watch(ctx, make(chan time.Time))
	}()
	cancel()
	<-watched
	e.noSnapshot()
	e.wantWorkers("1:prefill:schedulable")
}
