package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// acceptAllTestServer answers every selection-API route with success (201
// for POST /workers) and reports `active` requests in GET /loads: a target
// for checking the subcommand's flags and exit codes, not a selector.
func acceptAllTestServer(t *testing.T, active int) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/workers":
			ctx.SetStatusCode(201)
		case "/loads":
			ctx.SetBodyString(`[{"loads":[{"active_requests":` + string(rune('0'+active)) + `}]}]`)
		default:
			ctx.SetBodyString(`{"status":"ok"}`)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// TestBenchInProcess runs `kvselect bench` the default way: kvselect in
// this process with a live ZMQ listener per worker, the lifecycle mix, and
// the same-run no-op baseline. No reservation may leak and no call may fail.
func TestBenchInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	var out, errw bytes.Buffer
	args := []string{"--concurrency", "8", "--duration", "300ms", "--warmup", "50ms", "--workers", "3",
		"--prompts", "40", "--baseline", "noop", "--json", path, "--no-progress"}
	if code := benchMain(context.Background(), args, &out, &errw); code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests int64            `json:"requests"`
		Errors   map[string]int64 `json:"errors"`
		Leaked   *int64           `json:"leaked_reservations"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests == 0 || len(rep.Errors) != 0 || rep.Leaked == nil || *rep.Leaked != 0 {
		t.Fatalf("report %s", raw)
	}
	if code := run([]string{"bench", "--mix", "bogus"}); code != 2 {
		t.Fatalf("bad --mix: exit %d", code)
	}
}

func TestBenchAgainstTarget(t *testing.T) {
	url := acceptAllTestServer(t, 0)
	path := filepath.Join(t.TempDir(), "r.json")
	var out, errw bytes.Buffer
	args := []string{"--target", url, "--concurrency", "2", "--duration", "200ms", "--warmup", "50ms",
		"--mix", "reserve", "--workers", "2", "--block-size", "32", "--prompts", "50", "--seed", "9",
		"--baseline", "noop", "--json", path}
	if code := benchMain(context.Background(), args, &out, &errw); code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	if !strings.Contains(out.String(), "requests/s") || !strings.Contains(out.String(), "no-op baseline") {
		t.Fatalf("table:\n%s", out.String())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Mix       string          `json:"mix"`
		BlockSize int             `json:"block_size"`
		Seed      int64           `json:"seed"`
		Requests  int64           `json:"requests"`
		Leaked    *int64          `json:"leaked_reservations"`
		Baseline  json.RawMessage `json:"baseline"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Mix != "reserve" || rep.BlockSize != 32 || rep.Seed != 9 || rep.Requests == 0 || rep.Leaked == nil || len(rep.Baseline) == 0 {
		t.Fatalf("report %s", raw)
	}

	// Reservations left active make the command fail.
	leaky := acceptAllTestServer(t, 3)
	args[1] = leaky
	errw.Reset()
	if code := benchMain(context.Background(), args[:len(args)-4], &out, &errw); code != 1 || !strings.Contains(errw.String(), "3 reservations") {
		t.Fatalf("leaky target: exit %d, %s", code, errw.String())
	}
}

func TestBenchServeNoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var errw bytes.Buffer
	done := make(chan int)
	go func() { done <- benchMain(ctx, []string{"--serve-noop", "127.0.0.1:0"}, io.Discard, &errw) }()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
}
