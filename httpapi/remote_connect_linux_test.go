package httpapi_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// blackhole is a loopback address whose SYNs go unanswered: a socket
// listening with a backlog of 0 that never accepts, its queue filled, so
// Linux drops further SYNs and a connect hangs (an indexer host that is
// down behind a firewall looks the same).
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue; the dial that hangs is the proof.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Skip("the kernel accepts every connect: no blackhole here")
		}
	}
	return addr
}

// TestRemoteIndexConnectTimeout: an indexer that does not accept the
// connection is offline once the connect timeout passes, well before the
// call's own deadline: the selection answers 503 (not_ready), counted as
// a deadline.
func TestRemoteIndexConnectTimeout(t *testing.T) {
	addr := blackhole(t)
	old := httpapi.RemoteIndexConnectTimeout
	httpapi.RemoteIndexConnectTimeout = 100 * time.Millisecond
	t.Cleanup(func() { httpapi.RemoteIndexConnectTimeout = old })
	client, err := httpapi.NewRemoteIndex(httpapi.RemoteIndexConfig{URL: "http://" + addr, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := core.New(core.DefaultConfig(), core.Options{Primary: client})
	ep, bs := "http://w", uint32(4)
	if _, err := s.UpsertWorker(&core.WorkerSpec{WorkerID: 1, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var out core.Selection
		done <- s.Select(&core.SelectRequest{Prompt: core.Prompt{TokenIDs: []uint32{1, 2, 3, 4}, HasTokenIDs: true}}, &out)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, core.ErrNotReady) || err.Error() != "Indexer is offline" {
			t.Fatalf("select: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the selection waited for the call's one-minute deadline: no connect timeout")
	}
	if st := client.Stats(); st.Deadline+st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}
