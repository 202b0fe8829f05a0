package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

func TestParseDisaggFlags(t *testing.T) {
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil || o.core.Disagg.Order != core.DecodeAnchored || o.core.Disagg.PrefillFailure != core.FreeDecode || o.workersFile != "" {
		t.Fatalf("defaults: %v %+v", err, o.core.Disagg)
	}
	o, err = parseServe([]string{"--disagg-order", "prefill_anchored", "--disagg-prefill-failure", "Bypass-On-Decode", "--workers-file", "/x.json"}, envOf(nil), io.Discard)
	if err != nil || o.core.Disagg.Order != core.PrefillAnchored || o.core.Disagg.PrefillFailure != core.BypassOnDecode || o.workersFile != "/x.json" {
		t.Fatalf("%v %+v", err, o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--disagg-order", "decode"}, "--disagg-order must be `decode-anchored` or `prefill-anchored`, got `decode`"},
		{[]string{"--disagg-prefill-failure", "retry"}, "--disagg-prefill-failure must be `free-decode` or `bypass-on-decode`, got `retry`"},
		{[]string{"--workers-file", ""}, "--workers-file needs a path"},
		{[]string{"--workers-file", "/x.json", "--demo", "2"}, "--demo registers its engines itself: it cannot run with --workers-file"},
	} {
		if _, err := parseServe(tc.args, envOf(nil), io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// The conditional-disaggregation settings act on /disagg/plan now: not
	// reported as inactive.
	o, err = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_CONDITIONAL_DISAGG": "true", "DYN_ROUTER_CONDITIONAL_DISAGG_POLICY": "prefill_load",
		"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD": "10", "DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD": "0.5"}), io.Discard)
	if err != nil || len(o.inactive) != 0 {
		t.Fatalf("%v, inactive %v", err, o.inactive)
	}
}

// TestServeWorkersFileAndDisagg runs serve with a workers file naming a
// prefill and a decode worker: they are registered before the listener
// opens, the file owns the catalog (409 on every /workers mutation), a
// plan books both pools in the order of --disagg-order, the file's and the
// reconciler's metrics are exported, and serve stops with exit 0.
func TestServeWorkersFileAndDisagg(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.json")
	writeFile(t, path, workersJSON(workerEntry(1, "prefill"), workerEntry(2, "decode")))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--workers-file", path, "--disagg-order", "prefill-anchored"},
			envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), &logs, ready)
	}()
	var base string
	select {
	case b := <-ready:
		addr := b.http
		base = "http://" + addr
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	call := func(method, p, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+p, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := call("GET", "/workers", ""); code != 200 || strings.Count(body, `"lifecycle":"schedulable"`) != 2 {
		t.Fatalf("workers at start: %d %s", code, body)
	}
	const owned = `{"error":"worker catalog is managed by --workers-file"}`
	for _, c := range [][3]string{{"POST", "/workers", workerEntry(3, "decode")}, {"PATCH", "/workers/1", `{"block_size":32}`}, {"DELETE", "/workers/1", ""}} {
		if code, body := call(c[0], c[1], c[2]); code != 409 || body != owned {
			t.Errorf("%s %s: %d %s", c[0], c[1], code, body)
		}
	}
	code, body := call("POST", "/disagg/plan", `{"selection_id":"r","model_name":"m","token_ids":[1,2,3,4]}`)
	if code != 200 || !strings.Contains(body, `"order":"prefill_anchored","state":"linked"`) || !strings.Contains(body, `"worker_id":1`) || !strings.Contains(body, `"worker_id":2`) {
		t.Fatalf("plan: %d %s", code, body)
	}
	if code, body := call("DELETE", "/disagg/r", ""); code != 200 {
		t.Fatalf("release: %d %s", code, body)
	}
	_, metrics := call("GET", "/metrics", "")
	for _, want := range []string{"kvselect_workers_file_workers 2", "kvselect_workers_file_valid 1", "kvselect_workers_file_max_bytes 16777216",
		"kvselect_workers_file_invalid_total 0", "kvselect_catalog_reconcile_passes_total 1", "kvselect_catalog_reconciler_converged_workers 2",
		`kvselect_http_requests_total{route="POST /disagg/plan",code="200"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	// One line per catalog change, from the reconciler's observer.
	if l := logs.String(); strings.Count(l, `msg="worker upserted" target=kvselect::workers_file source=--workers-file`) != 2 {
		t.Fatalf("catalog changes not logged one line each:\n%s", l)
	}
	if l := logs.String(); !strings.Contains(l, `msg="workers file owns the catalog`) || !strings.Contains(l, "path="+path+" workers=2") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}
