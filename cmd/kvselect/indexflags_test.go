package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIndexShapeSettings: the environment the reference reads, the
// frontend's flag names over it, and the start-up errors and warning of
// Dynamo's IndexerPolicy::from_router_config.
func TestIndexShapeSettings(t *testing.T) {
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil || !o.core.UseKVEvents || o.core.ApproxTTL != 120*time.Second || o.core.PredictedTTL != 0 {
		t.Fatalf("defaults: %+v %v", o.core, err)
	}
	for _, tc := range []struct {
		args      []string
		env       map[string]string
		events    bool
		ttl, pred time.Duration
		warning   string
	}{
		{nil, map[string]string{"DYN_ROUTER_USE_KV_EVENTS": "false", "DYN_ROUTER_TTL_SECS": "30"}, false, 30 * time.Second, 0, ""},
		// The canonical name wins over the Rust-only alias.
		{nil, map[string]string{"DYN_ROUTER_USE_KV_EVENTS": "true", "DYN_USE_KV_EVENTS": "false"}, true, 120 * time.Second, 0, ""},
		{nil, map[string]string{"DYN_USE_KV_EVENTS": "0"}, false, 120 * time.Second, 0, ""},
		{[]string{"--no-router-kv-events", "--router-ttl-secs", "2.5"}, map[string]string{"DYN_ROUTER_TTL_SECS": "30"}, false, 2500 * time.Millisecond, 0, ""},
		{nil, map[string]string{"DYN_ROUTER_PREDICTED_TTL_SECS": "5"}, true, 120 * time.Second, 5 * time.Second, ""},
		{[]string{"--router-predicted-ttl-secs", "0"}, map[string]string{"DYN_ROUTER_PREDICTED_TTL_SECS": "5"}, true, 120 * time.Second, 0, ""},
		{[]string{"--no-router-kv-events"}, map[string]string{"DYN_ROUTER_APPROXIMATE_CACHE_POLICY": "lru"}, false, 120 * time.Second, 0, "falling back to TTL retention"},
	} {
		o, err := parseServe(tc.args, envOf(tc.env), io.Discard)
		if err != nil {
			t.Errorf("%v %v: %v", tc.args, tc.env, err)
			continue
		}
		if o.core.UseKVEvents != tc.events || o.core.ApproxTTL != tc.ttl || o.core.PredictedTTL != tc.pred {
			t.Errorf("%v %v: events=%t ttl=%v predicted=%v", tc.args, tc.env, o.core.UseKVEvents, o.core.ApproxTTL, o.core.PredictedTTL)
		}
		if got := strings.Join(o.warnings, "\n"); !strings.Contains(got, tc.warning) || (tc.warning == "" && got != "") {
			t.Errorf("%v %v: warnings %q, want %q", tc.args, tc.env, got, tc.warning)
		}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"DYN_ROUTER_APPROXIMATE_CACHE_POLICY": "lru"}, "router_approximate_cache_policy=lru requires use_kv_events=false; the local side indexer is TTL-only"},
		{[]string{"--router-approximate-cache-policy", "fifo"}, nil, `unknown approximate cache policy "fifo", expected 'ttl' or 'lru'`},
		{[]string{"--no-router-kv-events", "--router-predicted-ttl-secs", "5"}, nil, "router_predicted_ttl_secs requires use_kv_events=true; do not combine a primary approximate indexer with a side approximate indexer"},
		{nil, map[string]string{"DYN_ROUTER_PREDICTED_TTL_SECS": "0"}, "router_predicted_ttl_secs must be > 0"},
		{nil, map[string]string{"DYN_ROUTER_TTL_SECS": "-1"}, "router_ttl_secs must be >= 0"},
		{nil, map[string]string{"DYN_ROUTER_TTL_SECS": "soon"}, "DYN_ROUTER_TTL_SECS"},
		{nil, map[string]string{"DYN_ROUTER_USE_KV_EVENTS": "perhaps"}, "DYN_ROUTER_USE_KV_EVENTS"},
		{[]string{"--router-kv-events", "--no-router-kv-events"}, nil, "mutually exclusive"},
	} {
		_, err := parseServe(tc.args, envOf(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: got %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestServeApproximateMode runs serve without KV events: a booking over
// HTTP predicts its prompt on the booked worker (overlap_scores), a plain
// select does not, and /metrics exports the approximate index.
func TestServeApproximateMode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--no-router-kv-events"}, envOf(nil), &logs, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	post := func(path, body string) string {
		t.Helper()
		res, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	post("/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4}`)
	post("/workers", `{"worker_id":2,"endpoint":"http://w2","block_size":4}`)
	prompt := `"token_ids":[1,2,3,4,5,6,7,8]`
	post("/select", `{`+prompt+`}`)
	if got := post("/overlap_scores", `{`+prompt+`}`); strings.Contains(got, `"device_blocks":2`) {
		t.Fatalf("a plain select was recorded: %s", got)
	}
	post("/select_and_reserve", `{`+prompt+`,"pinned_worker":{"worker_id":2,"dp_rank":0}}`)
	got := post("/overlap_scores", `{`+prompt+`}`)
	if !strings.Contains(got, `{"worker_id":2,"dp_rank":0,"device_blocks":2`) {
		t.Fatalf("the booking was not recorded: %s", got)
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`kvselect_approx_index_blocks{index="primary"} 2`, `kvselect_approx_index_blocks_limit{index="primary"} 1048576`, `kvselect_approx_index_recordings_total{index="primary"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, logs.String())
	}
}

// TestTrackingHashSettings: keyed tracking needs exactly 32 raw bytes of
// key file and a key id; a key without keyed mode, keyed mode without a
// key, a missing or wrong-size file are start-up errors that never show
// the file's path.
func TestTrackingHashSettings(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte{0x5a}, n), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, short := file("good", 32), file("short", 31)
	o, err := parseServe([]string{"--router-tracking-hash", "keyed-xxh3-v1", "--router-tracking-key-file", good, "--router-tracking-key-id", "2026-01"}, envOf(nil), io.Discard)
	if err != nil || !o.core.Tracking.Keyed || len(o.core.Tracking.Key) != 32 || o.core.Tracking.KeyID != "2026-01" {
		t.Fatalf("%+v %v", o.core.Tracking, err)
	}
	o, err = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_TRACKING_HASH": "keyed-xxh3-v1", "DYN_ROUTER_TRACKING_KEY_FILE": good, "DYN_ROUTER_TRACKING_KEY_ID": "e1"}), io.Discard)
	if err != nil || !o.core.Tracking.Keyed || o.core.Tracking.KeyID != "e1" {
		t.Fatalf("from the environment: %+v %v", o.core.Tracking, err)
	}
	missing := filepath.Join(dir, "missing-key")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--router-tracking-hash", "keyed-xxh3-v1", "--router-tracking-key-id", "e"}, "keyed-xxh3-v1 requires router_tracking_key_file"},
		{[]string{"--router-tracking-hash", "keyed-xxh3-v1", "--router-tracking-key-file", good}, "keyed-xxh3-v1 requires a nonempty router_tracking_key_id"},
		{[]string{"--router-tracking-hash", "keyed-xxh3-v1", "--router-tracking-key-file", short, "--router-tracking-key-id", "e"}, "router tracking key file must contain exactly 32 raw bytes; found 31"},
		{[]string{"--router-tracking-hash", "keyed-xxh3-v1", "--router-tracking-key-file", missing, "--router-tracking-key-id", "e"}, "failed to read router tracking key file"},
		{[]string{"--router-tracking-key-file", good}, "router tracking key options require router_tracking_hash=keyed-xxh3-v1"},
		{[]string{"--router-tracking-key-id", "e"}, "router tracking key options require router_tracking_hash=keyed-xxh3-v1"},
		{[]string{"--router-tracking-hash", "md5"}, `router_tracking_hash must be public-xxh3-v1 or keyed-xxh3-v1, got "md5"`},
	} {
		_, err := parseServe(tc.args, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), dir) {
			t.Errorf("%v: the error shows the key file's path: %v", tc.args, err)
		}
	}
}
