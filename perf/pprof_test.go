package perf

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDebugServer: the debug listener serves the pprof index and named
// profiles, a short CPU profile, and nothing else; Shutdown stops it.
func TestDebugServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDebugServer(nil)
	done := make(chan error, 1)
	go func() { done <- d.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("index: %d %.200s", code, body)
	}
	for _, p := range []string{"heap", "goroutine", "mutex", "block", "allocs"} {
		if code, _ := get("/debug/pprof/" + p + "?debug=1"); code != 200 {
			t.Errorf("%s: %d", p, code)
		}
	}
	if code, body := get("/debug/pprof/profile?seconds=1"); code != 200 || len(body) == 0 {
		t.Errorf("cpu profile: %d, %d bytes", code, len(body))
	}
	for _, p := range []string{"/metrics", "/select", "/debug/pprofx"} {
		if code, _ := get(p); code != 404 {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
