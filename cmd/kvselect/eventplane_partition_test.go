package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/zmqin/natsplane"
)

func noEnv(string) (string, bool) { return "", false }

// TestServeHelpListsEventPlane: `serve --help` lists the event-plane flags
// beside serve's own and exits 0.
func TestServeHelpListsEventPlane(t *testing.T) {
	var out bytes.Buffer
	if code := serve(context.Background(), []string{"--help"}, noEnv, &out, nil); code != 0 {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	for _, f := range []string{"-port", "-replica-sync-port", "-event-plane", "-nats-server", "-nats-routes", "-event-plane-queue"} {
		if !strings.Contains(out.String(), "\n  "+f+" ") && !strings.Contains(out.String(), "\n  "+f+"\n") {
			t.Errorf("help lacks %s:\n%s", f, out.String())
		}
	}
}

// TestEventPlaneFlagsSplit: every flag of the event-plane set is one
// splitEventPlaneArgs takes out of serve's arguments, with its arity.
func TestEventPlaneFlagsSplit(t *testing.T) {
	fs, _ := eventPlaneFlagSet(noEnv, nil)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		isBool, ok := eventPlaneFlags[f.Name]
		bf, boolFlag := f.Value.(interface{ IsBoolFlag() bool })
		if !ok || isBool != (boolFlag && bf.IsBoolFlag()) {
			t.Errorf("flag %s: in the split table %v, boolean there %v", f.Name, ok, isBool)
		}
	})
	if n != len(eventPlaneFlags) {
		t.Errorf("%d flags, %d in the split table", n, len(eventPlaneFlags))
	}
}

// readyPlane is /ready's event_plane.
func readyPlane(t *testing.T, s *selector) (code int, ep struct {
	Connected   bool   `json:"connected"`
	Since       string `json:"since"`
	Disconnects uint64 `json:"disconnects"`
	Reconnects  uint64 `json:"reconnects"`
	Embedded    bool   `json:"embedded_server"`
}) {
	t.Helper()
	body, code := s.get("/ready")
	var r struct {
		EventPlane *json.RawMessage `json:"event_plane"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.EventPlane == nil {
		t.Fatalf("/ready %d %s: no event_plane (%v)", code, body, err)
	}
	if err := json.Unmarshal(*r.EventPlane, &ep); err != nil {
		t.Fatal(err)
	}
	return code, ep
}

// TestEventPlaneCutOff runs a client-only `kvselect serve` (the built
// binary, --nats-server) against a NATS server of the test's, and stops
// that server: the process stays ready and keeps selecting; /ready's
// event_plane and the connected gauge say it is cut off; once the server
// is back they say so again.
func TestEventPlaneCutOff(t *testing.T) {
	port := freePort(t)
	srv, err := natsplane.StartServer(natsplane.ServerConfig{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newSelector(t, []string{"DYN_USE_KV_EVENTS=false"}, "--event-plane", "nats", "--nats-server", srv.ClientURL())
	a.start()
	a.registerWorkers()
	if code, ep := readyPlane(t, a); code != 200 || !ep.Connected || ep.Embedded {
		t.Fatalf("/ready %d %+v", code, ep)
	}

	_ = srv.Close()
	a.eventually("/ready to report the cut", func() bool { _, ep := readyPlane(t, a); return !ep.Connected && ep.Disconnects == 1 })
	m, _ := a.get("/metrics")
	if !strings.Contains(m, "kvselect_event_plane_connected 0") || !strings.Contains(m, "kvselect_event_plane_disconnects_total 1") {
		t.Errorf("metrics:\n%s", grepLines(m, "kvselect_event_plane_"))
	}
	if code, _ := readyPlane(t, a); code != 200 {
		t.Errorf("cut off: /ready %d, want 200 (it still selects)", code)
	}
	for i := range 20 {
		start := time.Now()
		a.book(fmt.Sprintf("cut-%d", i), 2)
		if d := time.Since(start); d > time.Second {
			t.Errorf("a booking cut off took %v", d)
		}
	}
	if _, _, n := a.totals(); n != 20 {
		t.Errorf("%d live requests, want the 20 booked cut off", n)
	}

	if srv, err = natsplane.StartServer(natsplane.ServerConfig{Port: port}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a.eventually("/ready to report the link back", func() bool { _, ep := readyPlane(t, a); return ep.Connected && ep.Reconnects == 1 })
}
