package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pythonExample is the Ray select-then-reserve flow in Python, beside the
// Go client's example.
const pythonExample = "../../httpapi/client/ray_select_then_reserve.py"

// TestRayPythonExample builds kvselect, starts `kvselect serve --demo 2`
// on a free port as its own process, and runs the Python example of the
// Ray select-then-reserve flow against it with Debian's /usr/bin/python3
// (standard library only): it must exit 0, select worker 1 (which the demo
// made cache the whole prompt), book the cached selection, see the second
// replay refused with 404, and leave no reservation. Without
// /usr/bin/python3 the test skips, and fails under CI=true.
func TestRayPythonExample(t *testing.T) {
	if _, err := os.Stat(debianPythonBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required: %v", debianPythonBin, err)
		}
		t.Skipf("SKIPPING: %s not found: %v", debianPythonBin, err)
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var logs syncBuf
	srv := exec.Command(bin, "serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--pprof=false", "--demo", "2")
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("kvselect serve --demo: %v\n%s", err, logs.String())
		}
	}()
	// --demo registers its engines and fills the index before it listens:
	// the first answered /ready is 200.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(base + "/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("kvselect exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30 s: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, err := exec.Command(debianPythonBin, pythonExample, "--url", base).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", pythonExample, err, out)
	}
	for _, want := range []string{
		"selector ready: 2 schedulable workers",
		"selected worker 1 dp_rank 0 at demo://engine-1: 128 of 128 tokens cached",
		"reserved ray-req-1 on worker 1 (cached selection)",
		"second replay: 404 no pending selection ray-req-1",
		"freed ray-req-1; active requests left: 0",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// debianPythonBin is the interpreter the examples are run with.
const debianPythonBin = "/usr/bin/python3"
