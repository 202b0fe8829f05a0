package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/sched"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseServeDefaults(t *testing.T) {
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 8092 || o.host != "0.0.0.0" || o.core.IndexShards != 0 {
		t.Fatalf("defaults: %+v", o)
	}
	if o.core.SelectionCacheTTL != 120*time.Second || o.core.SelectionCacheMaxEntries != 4096 || o.core.SelectionCacheMaxBytes != 268435456 {
		t.Fatalf("cache defaults: %+v", o.core)
	}
	if o.core.MaxReservations != 1<<20 || o.core.MaxReservationBytes != 512<<20 || o.core.MaxListeners != 4096 {
		t.Fatalf("limit defaults: %+v", o.core)
	}
	if !o.core.Sched.AssumeKVReuse || !o.core.UseKVEvents || o.debugAddr != "127.0.0.1:6060" || len(o.inactive) != 0 {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestParseServeFlags(t *testing.T) {
	o, err := parseServe([]string{"--port", "9000", "--host=127.0.0.1", "--selection-cache-ttl-secs", "2.5",
		"--selection-cache-max-entries", "10", "--selection-cache-max-bytes", "1000", "--no-router-assume-kv-reuse", "--threads", "2"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 9000 || o.host != "127.0.0.1" || o.core.SelectionCacheTTL != 2500*time.Millisecond ||
		o.core.SelectionCacheMaxEntries != 10 || o.core.SelectionCacheMaxBytes != 1000 || o.core.Sched.AssumeKVReuse || o.core.IndexShards != 2 {
		t.Fatalf("%+v", o)
	}
	// The flag overrides the environment.
	o, err = parseServe([]string{"--router-assume-kv-reuse"}, envOf(map[string]string{"DYN_ROUTER_ASSUME_KV_REUSE": "false"}), io.Discard)
	if err != nil || !o.core.Sched.AssumeKVReuse {
		t.Fatalf("%v %+v", err, o)
	}
}

func TestParseServeErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--replica-sync-peers", "tcp://b:9092"}, nil, "--replica-sync-peers requires --replica-sync-port"},
		{[]string{"--replica-sync-port", "0"}, nil, "replica sync port must be greater than zero"},
		{[]string{"--replica-sync-port", "9092", "--replica-sync-peers", "udp://b:1"}, nil, "unsupported scheme `udp`"},
		{[]string{"--router-assume-kv-reuse", "--no-router-assume-kv-reuse"}, nil, "mutually exclusive"},
		{[]string{"--threads", "0"}, nil, "--threads"},
		{[]string{"--selection-cache-ttl-secs", "0"}, nil, "ttl"},
		{[]string{"--selection-cache-max-entries", "0"}, nil, "max entries"},
		{[]string{"--max-reservations", "0"}, nil, "limits must be > 0"},
		{[]string{"--max-reservation-bytes", "-1"}, nil, "limits must be > 0"},
		{[]string{"--max-kv-listeners", "0"}, nil, "limits must be > 0"},
		{[]string{"--session-affinity-ttl-secs", "0.5"}, nil, "session affinity TTL must be between 1 and 31536000 seconds"},
		{[]string{"--session-affinity-ttl-secs", "31536001"}, nil, "session affinity TTL must be between 1 and 31536000 seconds"},
		{[]string{"--session-affinity-mode", "firm"}, nil, `invalid session affinity mode "firm"; expected 'hard' or 'soft'`},
		{[]string{"--router-queue-policy", "sjf"}, nil, "--router-queue-policy"},
		{nil, map[string]string{"DYN_ROUTER_QUEUE_POLICY": "sjf"}, "DYN_ROUTER_QUEUE_POLICY"},
		{[]string{"--router-queue-threshold", "-1"}, nil, "router_queue_threshold"},
		{nil, map[string]string{"DYN_ROUTER_POLICY_CONFIG": "/nonexistent/policy.yaml"}, "failed to read router policy config /nonexistent/policy.yaml"},
		{nil, map[string]string{"DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS": "soon"}, "DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS"},
		{[]string{"--indexer-peers", "ftp://x"}, nil, "--indexer-peers"},
		{[]string{"--router-tracking-hash", "md5"}, nil, "--router-tracking-hash"},
		{[]string{"--nope"}, nil, "flag provided but not defined"},
		{nil, map[string]string{"DYN_ROUTER_TEMPERATURE": "hot"}, "DYN_ROUTER_TEMPERATURE"},
		{nil, map[string]string{"DYN_ROUTER_TEMPERATURE": "-1"}, "router_temperature"},
		{nil, map[string]string{"DYN_USE_KV_EVENTS": "maybe"}, "DYN_USE_KV_EVENTS"},
		{nil, map[string]string{"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD": "1.5"}, "conditional_disagg_eff_isl_ratio_threshold must be between 0 and 1"},
		{nil, map[string]string{"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD": "-1"}, "DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD"},
	} {
		_, err := parseServe(tc.args, envOf(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: got %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestPolicyAndReplicaSyncEnv: the reference's policy and replica-sync
// variables act or are refused at start-up, none is silently inert.
func TestPolicyAndReplicaSyncEnv(t *testing.T) {
	o, err := parseServe(nil, envOf(map[string]string{"DYN_ROUTER_PREFILL_POLICY": " cache_balance ", "DYN_ROUTER_DECODE_POLICY": "default",
		"DYN_ROUTER_WORKER_SELECTION_POLICY": "cache_balance", "DYN_ROUTER_REPLICA_SYNC": "false"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.core.Disagg.PrefillPolicy != "cache_balance" || o.core.Disagg.DecodePolicy != "default" || o.core.SelectionPolicy.Name != "cache_balance" || len(o.inactive) != 0 {
		t.Fatalf("disagg %+v, policy %s, inactive %v", o.core.Disagg, o.core.SelectionPolicy.Name, o.inactive)
	}
	// --routing-policy wins over DYN_ROUTER_WORKER_SELECTION_POLICY.
	o, err = parseServe([]string{"--routing-policy", "default"}, envOf(map[string]string{"DYN_ROUTER_WORKER_SELECTION_POLICY": "cache_balance"}), io.Discard)
	if err != nil || o.core.SelectionPolicy.Name != "default" {
		t.Fatalf("flag over env: %v %v", o, err)
	}
	o, err = parseServe([]string{"--replica-sync-port", "9999"}, envOf(map[string]string{"DYN_ROUTER_REPLICA_SYNC": "true"}), io.Discard)
	if err != nil || o.replicaPort != 9999 || len(o.inactive) != 0 {
		t.Fatalf("replica sync with a port: %v %v", o.inactive, err)
	}
	// Without the port the reference ignores it too: reported, not fatal.
	o, err = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_REPLICA_SYNC": "1"}), io.Discard)
	if err != nil || o.replicaPort != 0 || len(o.inactive) != 1 || !strings.Contains(o.inactive[0], "DYN_ROUTER_REPLICA_SYNC") {
		t.Fatalf("replica sync without a port: %v %v", o.inactive, err)
	}
	for env, want := range map[string]string{
		"DYN_ROUTER_PREFILL_POLICY=x":          `DYN_ROUTER_PREFILL_POLICY: "x" is not default or cache_balance`,
		"DYN_ROUTER_DECODE_POLICY=lru":         `DYN_ROUTER_DECODE_POLICY: "lru"`,
		"DYN_ROUTER_WORKER_SELECTION_POLICY=y": `DYN_ROUTER_WORKER_SELECTION_POLICY: "y"`,
		"DYN_ROUTER_REPLICA_SYNC=maybe":        `DYN_ROUTER_REPLICA_SYNC: "maybe" is not a boolean`,
	} {
		k, v, _ := strings.Cut(env, "=")
		if _, err := parseServe(nil, envOf(map[string]string{k: v}), io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
}

func TestEnvMapping(t *testing.T) {
	o, err := parseServe(nil, envOf(map[string]string{
		"DYN_ROUTER_TEMPERATURE":                              "0.5",
		"DYN_OVERLAP_SCORE_WEIGHT":                            "2",
		"DYN_ROUTER_TRACK_OUTPUT_BLOCKS":                      "true",
		"DYN_ROUTER_CONDITIONAL_DISAGG_DECODE_BUSY_THRESHOLD": "0.9",
		"DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS":               "0",
		"DYN_USE_KV_EVENTS":                                   "false",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := o.core.Sched
	if s.RouterTemperature != 0.5 || s.OverlapScoreWeight == nil || *s.OverlapScoreWeight != 2 || !s.TrackOutputBlocks ||
		s.DecodeBusyThreshold == nil || *s.DecodeBusyThreshold != 0.9 || s.ActiveRequestExpiry != 300*time.Second || o.core.UseKVEvents {
		t.Fatalf("%+v", s)
	}
	o, err = parseServe(nil, envOf(map[string]string{
		"DYN_ROUTER_CONDITIONAL_DISAGG":                         "true",
		"DYN_ROUTER_CONDITIONAL_DISAGG_POLICY":                  "isl_or_load",
		"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD":       "100",
		"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD": "0.5",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p := o.core.Sched.DisaggPolicy(); p != (sched.DisaggPolicy{Kind: sched.ISLOrLoad, Enabled: true, EffISLThreshold: 100, EffISLRatioThreshold: 0.5}) {
		t.Fatalf("policy %+v", p)
	}
	// An unparsable policy keeps the default, silently, as Dynamo's
	// environment parser does.
	o, err = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_CONDITIONAL_DISAGG_POLICY": "fastest"}), io.Discard)
	if err != nil || o.core.Sched.ConditionalDisaggPolicy != sched.ISLBounding {
		t.Fatalf("unparsable policy: %v %v", err, o)
	}
	o, _ = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS": "42"}), io.Discard)
	if o.core.Sched.ActiveRequestExpiry != 42*time.Second {
		t.Fatal(o.core.Sched.ActiveRequestExpiry)
	}
}

// TestEveryEnvRowSetsItsField sets each schedEnv name alone to a value
// unlike its default and expects the config to change: a row wired to the
// wrong field (or to none) fails.
func TestEveryEnvRowSetsItsField(t *testing.T) {
	def, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range schedEnv {
		for _, name := range row.names {
			changed := false
			for _, v := range []string{"0.25", "0.5", "false", "true", "7", "prefill_load", "wspt"} {
				o, err := parseServe(nil, envOf(map[string]string{name: v}), io.Discard)
				if err == nil && !reflect.DeepEqual(o.core.Sched, def.core.Sched) {
					changed = true
					break
				}
			}
			if !changed {
				t.Errorf("%s changes nothing in sched.Config", name)
			}
		}
	}
}

func TestKVEndpointNetworksFlag(t *testing.T) {
	o, err := parseServe([]string{"--kv-endpoint-networks", "10.1.2.3/8, 127.0.0.1/32"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(o.core.KVEndpointNetworks); got != "[10.0.0.0/8 127.0.0.1/32]" {
		t.Fatalf("networks %s", got)
	}
	if o, _ := parseServe(nil, envOf(nil), io.Discard); o.core.KVEndpointNetworks != nil {
		t.Fatalf("default networks %v, want nil (any)", o.core.KVEndpointNetworks)
	}
	if _, err := parseServe([]string{"--kv-endpoint-networks", "10.0.0.1"}, envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "not a CIDR") {
		t.Fatalf("bare address accepted: %v", err)
	}
}

// TestServeLifecycle starts the real binary's serve path on a loopback
// port, speaks HTTP to it, then cancels (as a signal would) and expects a
// clean exit 0 with no listener left.
func TestServeLifecycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--session-affinity-ttl-secs", "60"}, envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), &logs, ready)
	}()
	var addr string
	select {
	case b := <-ready:
		addr = b.http
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	res, err := http.Post("http://"+addr+"/workers", "application/json", strings.NewReader(`{"worker_id":1,"endpoint":"http://w","block_size":4}`))
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("%v %v", err, res)
	}
	res.Body.Close()
	res, err = http.Get("http://" + addr + "/ready")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", err, res)
	}
	res.Body.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if strings.Contains(logs.String(), "accepted without effect") {
		t.Fatalf("an active setting logged as inactive: %s", logs.String())
	}
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Fatal("listener still open after shutdown")
	}
}

// TestServeFinishesInFlightProfile cancels while a 1 s CPU profile is in
// flight on the debug listener (--debug-addr): the profile still
// completes with 200 and serve exits 0. The API port serves no pprof.
func TestServeFinishesInFlightProfile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	var logs syncBuf
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--debug-addr", "127.0.0.1:0"}, envOf(nil), &logs, ready)
	}()
	b := <-ready
	if b.debug == "" {
		t.Fatal("no debug listener")
	}
	if res, err := http.Get("http://" + b.http + "/debug/pprof/heap"); err != nil || res.StatusCode != 404 {
		t.Fatalf("pprof on the API port: %v %v", err, res)
	}
	got := make(chan int, 1)
	go func() {
		res, err := http.Get("http://" + b.debug + "/debug/pprof/profile?seconds=1")
		if err != nil {
			got <- -1
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got <- res.StatusCode
	}()
	// In flight once the runtime's CPU profile writer runs.
	for {
		res, err := http.Get("http://" + b.debug + "/debug/pprof/goroutine?debug=2")
		if err != nil {
			t.Fatal(err)
		}
		dump, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(dump), "runtime/pprof.profileWriter") {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if code := <-got; code != 200 {
		t.Fatalf("in-flight profile: %d; logs: %s", code, logs.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, logs.String())
	}
}

// TestMootFlagsReported: a flag that acts on nothing in its combination is
// reported at start-up, never silently ignored.
func TestMootFlagsReported(t *testing.T) {
	o, err := parseServe([]string{"--pprof=false", "--pprof-block-rate", "5", "--demo-block-size", "8", "--no-replica-snapshot",
		"--session-affinity-mode", "soft"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(o.inactive, "\n")
	for _, want := range []string{"--pprof-block-rate", "--demo-block-size", "--no-replica-snapshot", "--session-affinity-mode"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s not reported in %q", want, got)
		}
	}
	if o, err = parseServe([]string{"--demo", "2", "--demo-block-size", "8"}, envOf(nil), io.Discard); err != nil || len(o.inactive) != 0 {
		t.Fatalf("an effective flag reported: %v %v", o.inactive, err)
	}
}
