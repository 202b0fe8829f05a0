package zmqtest

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// CheckNoLeak fails the test if goroutines started during it are still
// running after cleanup; register it first so it runs last.
func CheckNoLeak(t testing.TB) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base, buf[:n])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// Cat concatenates byte strings (encoded frames into one stream).
func Cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
