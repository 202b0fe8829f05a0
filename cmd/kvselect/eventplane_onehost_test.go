package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestEventPlaneDefaultsOnOneHost: two selectors and an indexer with
// --event-plane nats and no flag but their ports start side by side: the
// embedded NATS server's default client address (127.0.0.1:4222) is taken
// by the first, and the others listen on a free port instead, saying so
// (the second process used to wait ten seconds for a server that never
// got its listener, then exit).
func TestEventPlaneDefaultsOnOneHost(t *testing.T) {
	var procs []*selector
	for _, sub := range []string{"serve", "serve", "indexer"} {
		s := &selector{t: t, http: freePort(t)}
		s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
		s.args = []string{sub, "--port", fmt.Sprint(s.http), "--event-plane", "nats"}
		s.start()
		procs = append(procs, s)
	}
	for _, s := range procs[1:] {
		s.eventually("the warning about the taken NATS address", func() bool {
			l := s.logs.String()
			return strings.Contains(l, "default client address is taken") && strings.Contains(l, "--nats-listen")
		})
		s.must("GET", "/health", "", 200)
	}
}

// TestExplicitNATSListenTaken: a --nats-listen the user gave that cannot
// be bound stops the start at once, naming the flag.
func TestExplicitNATSListenTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs syncBuf
	code := serve(context.Background(), []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--event-plane", "nats", "--nats-listen", ln.Addr().String()}, envOf(nil), &logs, nil)
	if code == 0 || !strings.Contains(logs.String(), "--nats-listen") || !strings.Contains(logs.String(), "address already in use") {
		t.Fatalf("exit %d, want a failure naming --nats-listen:\n%s", code, logs.String())
	}
}
