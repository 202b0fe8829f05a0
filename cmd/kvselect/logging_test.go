package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLogEnv(t *testing.T) {
	for _, tc := range []struct {
		dynLog, jsonl string
		wantJSON      bool
		levels        map[string]slog.Level // target -> level
		ignored       int
		invalid       int
	}{
		{"", "", false, map[string]slog.Level{"kvselect": slog.LevelInfo, "kvselect::zmqin": slog.LevelInfo}, 0, 0},
		{"debug", "1", true, map[string]slog.Level{"kvselect": slog.LevelDebug}, 0, 0},
		{"WARN", "TRUE", true, map[string]slog.Level{"kvselect::httpapi": slog.LevelWarn}, 0, 0},
		{"4", "yes", true, map[string]slog.Level{"kvselect": slog.LevelDebug}, 0, 0},
		{"0", "0", false, map[string]slog.Level{"kvselect": levelOff}, 0, 0},
		{"trace", "false", false, map[string]slog.Level{"kvselect": levelTrace}, 0, 0},
		// Targets: the longest matching one wins; other crates' are ignored.
		{"warn,kvselect::zmqin=debug,dynamo_llm=trace", "on", true,
			map[string]slog.Level{"kvselect": slog.LevelWarn, "kvselect::zmqin": slog.LevelDebug, "kvselect::zmqinx": slog.LevelWarn, "kvselect::httpapi": slog.LevelWarn}, 1, 0},
		{"error,kvselect=info,kvselect::mesh=off", "", false,
			map[string]slog.Level{"kvselect": slog.LevelInfo, "kvselect::zmqin": slog.LevelInfo, "kvselect::mesh": levelOff}, 0, 0},
		// A bare target enables everything for it, as in EnvFilter.
		{"kvselect::demo", "", false, map[string]slog.Level{"kvselect::demo": levelTrace, "kvselect": slog.LevelInfo}, 0, 0},
		// Invalid directives are ignored, the rest applies (lossy).
		{"debug,kvselect=loud,=info, ,a[b]=info", "", false, map[string]slog.Level{"kvselect": slog.LevelDebug}, 0, 3},
	} {
		env := map[string]string{"DYN_LOG": tc.dynLog, "DYN_LOGGING_JSONL": tc.jsonl}
		c := parseLogEnv(envOf(env))
		if c.jsonl != tc.wantJSON || len(c.ignored) != tc.ignored || len(c.invalid) != tc.invalid {
			t.Errorf("%q/%q: jsonl %v, ignored %v, invalid %v", tc.dynLog, tc.jsonl, c.jsonl, c.ignored, c.invalid)
		}
		for target, want := range tc.levels {
			if got := c.levelOf(target); got != want {
				t.Errorf("DYN_LOG=%q: %s at %v, want %v", tc.dynLog, target, got, want)
			}
		}
	}
}

// TestServeLogsJSONLines: with DYN_LOGGING_JSONL=1 every line serve writes
// is one JSON object with Dynamo's keys (time, level, target, message);
// the start-up line carries the effective configuration once and never
// the bearer token; DYN_LOG=warn,kvselect=info keeps kvselect's info lines.
func TestServeLogsJSONLines(t *testing.T) {
	const token = "tok-3f9a2c71d5e04b86"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, []string{"--auth-token-file", tokenFile, "--selection-cache-ttl-secs", "7"},
		map[string]string{"DYN_USE_KV_EVENTS": "false", "DYN_LOGGING_JSONL": "1", "DYN_LOG": "warn,kvselect=info"})
	r.do("GET", "/health", "")
	logs := r.logs.String()
	if strings.Contains(logs, token) {
		t.Fatalf("the token is in the log:\n%s", logs)
	}
	var starts int
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		for _, k := range []string{"time", "level", "target", "message"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("line without %q: %s", k, line)
			}
		}
		if rec["message"] == "starting" {
			starts++
			if rec["bearer_token_required"] != true || rec["selection_cache_ttl"] != "7s" || rec["kv_events"] != false || rec["port"] != float64(0) {
				t.Errorf("start-up line: %s", line)
			}
			router, ok := rec["router"].(map[string]any)
			if !ok || router["router_assume_kv_reuse"] != true {
				t.Errorf("start-up line without the router configuration: %s", line)
			}
		}
	}
	if starts != 1 {
		t.Fatalf("%d start-up lines, want 1:\n%s", starts, logs)
	}
}
