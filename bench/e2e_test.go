package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func smallRun(target string) Config {
	cfg := DefaultConfig()
	cfg.Target = target
	cfg.Concurrency = 4
	cfg.Warmup = 50 * time.Millisecond
	cfg.Duration = 250 * time.Millisecond
	cfg.Workers = 3
	cfg.Synthetic = smallSynthetic()
	cfg.Synthetic.Prompts = 64
	return cfg
}

// TestRunAgainstCountingServer drives a real loopback fasthttp server with
// the lifecycle mix and the no-op baseline, and checks the calls the server
// saw, the errors the report counted and the JSON report's keys.
func TestRunAgainstCountingServer(t *testing.T) {
	srv := startCountingTestServer(t, func(s *countingTestServer) { s.failReserveEvery = 5 })
	cfg := smallRun(srv.url)
	cfg.Baseline = "noop"
	cfg.OutputBlocks = 2
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.calls()
	if got["workers"] != 3 || got["bad_body"] != 0 || got["active"] != 0 {
		t.Fatalf("server saw %v", got)
	}
	// The server saw the warm-up too; every operation finished.
	ok := got["select_and_reserve"] - got["select_and_reserve"]/5
	if got["prefill_complete"] != ok || got["output_block"] != 2*ok || got["delete"] != ok || got["select"] != 0 {
		t.Fatalf("server calls %v; want %d bookings each with prefill, 2 output blocks and delete", got, ok)
	}
	if rep.Requests == 0 || rep.ByRoute["select_and_reserve"] > int64(got["select_and_reserve"]) {
		t.Fatalf("report %v vs server %v", rep.ByRoute, got)
	}
	fails := rep.Errors["503"]
	if fails == 0 || len(rep.Errors) != 1 || rep.ByRoute["delete"] != rep.ByRoute["select_and_reserve"]-fails {
		t.Fatalf("errors %v, by route %v", rep.Errors, rep.ByRoute)
	}
	if rep.LeakedReservations != 0 {
		t.Fatalf("leaked %d", rep.LeakedReservations)
	}
	b := rep.Baseline
	if b == nil || b.Requests == 0 || len(b.Errors) != 0 || b.ByRoute["delete"] != b.ByRoute["select_and_reserve"] {
		t.Fatalf("baseline %+v", b)
	}
	if rep.Ratios == nil || rep.Ratios.Throughput <= 0 {
		t.Fatalf("ratios %+v", rep.Ratios)
	}

	path := filepath.Join(t.TempDir(), "report.json")
	if err := rep.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	keys := []string{"throughput_rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "requests", "errors", "mean_overlap_blocks", "mean_prompt_blocks"}
	base, _ := m["baseline"].(map[string]any)
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
		if _, ok := base[k]; !ok {
			t.Errorf("baseline lacks %q", k)
		}
	}
	if errs, _ := m["errors"].(map[string]any); errs["503"] != float64(fails) {
		t.Errorf("errors in JSON: %v", m["errors"])
	}
	if v, ok := m["leaked_reservations"]; !ok || v != float64(0) {
		t.Errorf("leaked_reservations: %v", v)
	}
	// The server matched 32 tokens of every selection, 2 blocks of 16; the
	// no-op matches none.
	if m["mean_overlap_blocks"] != float64(2) || base["mean_overlap_blocks"] != float64(0) || m["prompt_form"] != "hashes" {
		t.Errorf("mean_overlap_blocks %v, baseline %v, prompt_form %v", m["mean_overlap_blocks"], base["mean_overlap_blocks"], m["prompt_form"])
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"requests/s", "no-op baseline", "p99.9 ms", "503=", "leaked reservations: 0", "mean overlap blocks", "index not filled"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

// TestRunTokenBodies: with PromptForm tokens every selection body carries
// token_ids (the server counts any other body as bad).
func TestRunTokenBodies(t *testing.T) {
	srv := startCountingTestServer(t, nil)
	cfg := smallRun(srv.url)
	cfg.PromptForm = PromptTokens
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.calls()
	if got["bad_body"] != 0 || got["select_and_reserve"] == 0 || rep.ErrorCount() != 0 || rep.PromptForm != PromptTokens {
		t.Fatalf("server %v, errors %v, form %q", got, rep.Errors, rep.PromptForm)
	}
}

// TestRunReportsLeaks: a server that answers DELETE without freeing shows
// every booking as leaked.
func TestRunReportsLeaks(t *testing.T) {
	srv := startCountingTestServer(t, func(s *countingTestServer) { s.leakDeletes = true })
	cfg := smallRun(srv.url)
	cfg.Mix = MixReserve
	cfg.Workload, cfg.TraceLimit = "trace:"+mooncakePath, mooncakeLimit
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.calls()
	if rep.LeakedReservations == 0 || rep.LeakedReservations != int64(got["select_and_reserve"]) || got["bad_body"] != 0 {
		t.Fatalf("leaked %d, server %v", rep.LeakedReservations, got)
	}
}

// TestRunOpenLoopStallOverHTTP: the stall of one real handler call shows up
// in the open loop's latency.
func TestRunOpenLoopStallOverHTTP(t *testing.T) {
	srv := startCountingTestServer(t, func(s *countingTestServer) {
		s.stallAt, s.stall = 30, 150*time.Millisecond
	})
	cfg := smallRun(srv.url)
	cfg.Mix = MixSelect
	cfg.Concurrency = 1
	cfg.Rate = 500
	cfg.Warmup = 0
	cfg.Duration = 300 * time.Millisecond
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 150 operations are scheduled; on a starved machine some may stay
	// unsent past the drain, but every one is accounted for.
	if rep.Operations+rep.Errors["unsent"] != 150 || rep.P99ms < 100 || rep.LateOps < 30 {
		t.Fatalf("ops %d, errors %v, p99 %.1f ms, late %d: the stall is missing", rep.Operations, rep.Errors, rep.P99ms, rep.LateOps)
	}
}

func TestRunWithoutTarget(t *testing.T) {
	cfg := smallRun("")
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrNoServer) {
		t.Fatalf("got %v, want ErrNoServer", err)
	}
	srv := startCountingTestServer(t, nil)
	stopped := false
	cfg.StartServer = func() (Server, error) { return Server{URL: srv.url, Stop: func() { stopped = true }}, nil }
	rep, err := Run(context.Background(), cfg)
	if err != nil || rep.Target != srv.url || !stopped || rep.Requests == 0 {
		t.Fatalf("StartServer seam: %v, stopped %v", err, stopped)
	}
}

func TestRunNotReady(t *testing.T) {
	srv := startCountingTestServer(t, nil)
	cfg := smallRun(srv.url)
	cfg.Workers = 0 // nothing registers, so /ready stays 503
	cfg.ReadyTimeout = 200 * time.Millisecond
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("got %v", err)
	}
}

// TestRunCapturesProfiles: with a profile directory, the four profiles are
// fetched from the pprof base during the measured window and written out,
// and the no-op baseline's window is profiled in this process
// (noop-cpu.pprof, a gzipped profile).
func TestRunCapturesProfiles(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	pprofSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI())
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/block") {
			http.Error(w, "no block profile here", http.StatusNotFound)
			return
		}
		w.Write([]byte("profile bytes"))
	}))
	defer pprofSrv.Close()
	srv := startCountingTestServer(t, nil)
	cfg := smallRun(srv.url)
	cfg.ProfileDir = t.TempDir()
	cfg.PprofURL = pprofSrv.URL + "/debug/pprof"
	cfg.Baseline = "noop"
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	want := []string{"/debug/pprof/block?seconds=1", "/debug/pprof/heap", "/debug/pprof/mutex?seconds=1", "/debug/pprof/profile?seconds=1"}
	if !slices.Equal(seen, want) {
		t.Fatalf("fetched %v, want %v", seen, want)
	}
	if len(rep.Profiles) != 4 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "block") {
		t.Fatalf("profiles %v, warnings %v", rep.Profiles, rep.Warnings)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.ProfileDir, "noop-cpu.pprof")); err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("noop-cpu.pprof: %d bytes, %v; want a gzipped profile", len(b), err)
	}
	for _, name := range []string{"cpu", "heap", "mutex"} {
		if b, err := os.ReadFile(filepath.Join(cfg.ProfileDir, name+".pprof")); err != nil || string(b) != "profile bytes" {
			t.Errorf("%s.pprof: %q, %v", name, b, err)
		}
	}
}

// TestRunLoadsUnreadable: a target whose /loads cannot be read still gets a
// report, with the leak check marked unknown rather than zero.
func TestRunLoadsUnreadable(t *testing.T) {
	srv := startCountingTestServer(t, func(s *countingTestServer) { s.brokenLoads = true })
	rep, err := Run(context.Background(), smallRun(srv.url))
	if err != nil {
		t.Fatal(err)
	}
	if rep.LeakedReservations != -1 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "/loads") {
		t.Fatalf("leaked %d, warnings %v", rep.LeakedReservations, rep.Warnings)
	}
}
