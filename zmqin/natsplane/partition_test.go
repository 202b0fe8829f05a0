package natsplane

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/nats-io/nats-server/v2/server"
)

// clusterMember runs one nats-server of a test cluster on fixed ports,
// not advertising the cluster's other client URLs: a client of this
// server then has no other to fail over to, so stopping it cuts the
// client off (a partition).
func clusterMember(t *testing.T, port, clusterPort int, routes ...int) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true, ServerName: fmt.Sprintf("s%d", port)}
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port, opts.Cluster.NoAdvertise = "kvselect", "127.0.0.1", clusterPort, true
	for _, r := range routes {
		opts.Routes = append(opts.Routes, server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", r))...)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// freePorts returns n distinct loopback ports free right now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// TestPartition: a node whose NATS server stops is cut off: its Link says
// so (down, since when, one disconnect), it keeps selecting and booking on
// its own view without waiting for the bus, and its KV view of a worker
// that published meanwhile is re-synchronised on reconnect (the envelope
// gap clears the rank before the next event applies).
func TestPartition(t *testing.T) {
	ports := freePorts(t, 4)
	pa, ca, pb, cb := ports[0], ports[1], ports[2], ports[3]
	sa := clusterMember(t, pa, ca, cb)
	clusterMember(t, pb, cb, ca)
	a := newNode(t, fmt.Sprintf("nats://127.0.0.1:%d", pa), 0)
	b := newNode(t, fmt.Sprintf("nats://127.0.0.1:%d", pb), 0)
	eventually(t, "the route", func() bool { return sa.NumRoutes() > 0 })
	w := newWorker(b.nc, 2, 0xabc)
	toks, local := prompt(0, 2)
	// The route carries A's interest asynchronously: store until A
	// applied one.
	for a.overlap(t, 2, toks) != 2 {
		w.send(t, store(0, local, 0))
		time.Sleep(5 * time.Millisecond)
	}
	if st := a.link.Status(); !st.Connected || st.Disconnects != 0 {
		t.Fatalf("link %+v", st)
	}

	sa.Shutdown()
	sa.WaitForShutdown()
	eventually(t, "A cut off", func() bool { return !a.link.Status().Connected })
	if st := a.link.Status(); st.Disconnects != 1 || st.Reconnects != 0 {
		t.Errorf("link %+v", st)
	}
	// Cut off, A selects and books on its own view at once.
	for i := range 50 {
		var sel core.Selection
		start := time.Now()
		if err := a.svc.SelectAndReserve(&core.SelectRequest{SelectionID: fmt.Sprintf("cut-%d", i), HasSelectionID: true, Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}}, &sel); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("a selection cut off took %v", d)
		}
		if sel.WorkerID != 2 {
			t.Fatalf("cut off, selected %d, want 2 (its own view holds the prefix)", sel.WorkerID)
		}
	}
	// The worker evicts everything while A cannot hear it.
	w.send(t, radix.Event{Kind: radix.Cleared})
	eventually(t, "B applied the clear", func() bool { return b.overlap(t, 2, toks) == 0 })
	if a.overlap(t, 2, toks) != 2 {
		t.Fatal("A's view changed while cut off")
	}

	clusterMember(t, pa, ca, cb)
	eventually(t, "A reconnected", func() bool { st := a.link.Status(); return st.Connected && st.Reconnects == 1 })
	// The worker's next envelope reaches A past the one it missed: the
	// rank is cleared before the event applies.
	toks2, local2 := prompt(100, 1)
	for a.in.Stats().EnvelopeGaps == 0 {
		w.send(t, store(100, local2, 0))
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, "A's stale view gone", func() bool { return a.overlap(t, 2, toks) == 0 && a.overlap(t, 2, toks2) == 1 })
}

// TestDialInProcess: a Link over the in-process pipe reaches TCP clients
// of the same server both ways.
func TestDialInProcess(t *testing.T) {
	srv, tcp := bus(t)
	link, err := DialInProcess(srv, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	if st := link.Status(); !st.Connected {
		t.Fatalf("%+v", st)
	}
	in, err := link.Conn().SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	back, err := tcp.SubscribeSync("y")
	if err != nil {
		t.Fatal(err)
	}
	_ = link.Conn().Flush()
	_ = tcp.Flush()
	_ = tcp.Publish("x", []byte("to pipe"))
	_ = link.Conn().Publish("y", []byte("to tcp"))
	if m, err := in.NextMsg(5 * time.Second); err != nil || string(m.Data) != "to pipe" {
		t.Fatalf("pipe side: %v %v", m, err)
	}
	if m, err := back.NextMsg(5 * time.Second); err != nil || string(m.Data) != "to tcp" {
		t.Fatalf("tcp side: %v %v", m, err)
	}
}
