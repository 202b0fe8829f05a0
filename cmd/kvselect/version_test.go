package main

import (
	"context"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildInfoOf(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		linked string
		bi     *debug.BuildInfo
		want   buildInfo
	}{
		{"v1.2.3", vcs("0123456789abcdef", "true"), buildInfo{"v1.2.3", "go1.26.8"}},
		{"", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"}}, buildInfo{"v0.4.0", "go1.26.8"}},
		{"", vcs("0123456789abcdef", "false"), buildInfo{"0123456789ab", "go1.26.8"}},
		{"", vcs("0123456789abcdef", "true"), buildInfo{"0123456789ab+dirty", "go1.26.8"}},
		{"", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, buildInfo{"devel", "go1.26.8"}},
	} {
		if got := buildInfoOf(tc.linked, tc.bi); got != tc.want {
			t.Errorf("buildInfoOf(%q, %+v) = %+v, want %+v", tc.linked, tc.bi, got, tc.want)
		}
	}
}

// TestHealthSubcommand: `kvselect health` exits 0 on a live selector's
// /health, 1 on a /ready that answers 503 and 1 when nothing listens.
func TestHealthSubcommand(t *testing.T) {
	r := startServe(t, nil, map[string]string{"DYN_USE_KV_EVENTS": "false"})
	var out strings.Builder
	if code := runHealth(context.Background(), []string{"--url", r.base}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), `200 {"status":"ok"}`) {
		t.Fatalf("health: exit %d, %q", code, out.String())
	}
	if code := runHealth(context.Background(), []string{"--url", r.base, "--path", "/ready"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("/ready with no worker: exit %d, want 1", code)
	}
	if code := runHealth(context.Background(), []string{"--url", "http://" + refusedAddr, "--timeout", "2s"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("nothing listening: exit %d, want 1", code)
	}
}
