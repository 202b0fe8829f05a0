package main

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/natsplane"
	"github.com/nats-io/nats.go"
)

// The replicas of `kvselect bench --replicas N --event-plane nats`: the
// same in-process replicas as inProcessReplicas' (replicas.go), whose
// bookings go over the NATS event plane instead of the ZMQ mesh, measured
// beside the mesh in the same run (bench.Config.StartAltReplicas).

// benchNATS is one bench replica's event plane: its embedded server,
// clustered with the others', its connection and its bookings.
type benchNATS struct {
	srv  *natsplane.Server
	link *natsplane.Link
	bk   *natsplane.Bookings
	// pings has bit i set once a readiness ping of replica i came in.
	pings atomic.Uint64
}

// benchScope is the bench replicas' event-plane scope (Dynamo's
// defaults).
var benchScope = natsplane.Scope{Namespace: "dynamo", Component: "backend", Endpoint: "generate"}

// benchReadySubject carries the readiness pings of awaitNATS.
const benchReadySubject = "kvselect.bench.ready"

// inProcessNATSReplicas returns the bench.Config.StartAltReplicas hook:
// n replicas configured from serve's flags (args) as inProcessReplicas
// configures them, each with an embedded NATS server on free loopback
// ports, the servers clustered through routes (each routed to the
// first's; NATS gossips the rest), and natsplane.Bookings as its replica
// sink. It returns once every server has its n-1 routes and a ping
// published by each replica reached every other: a message published
// before the interest crossed the routes is lost, and a booking lost that
// way would show as a leak, not as lag.
func inProcessNATSReplicas(args ...string) func(n int) ([]bench.Replica, func(), error) {
	return func(n int) ([]bench.Replica, func(), error) {
		reps := make([]*replica, 0, n)
		stopAll := func() {
			for i := len(reps) - 1; i >= 0; i-- {
				reps[i].stop()
			}
		}
		var first string
		for i := range n {
			cfg := natsplane.ServerConfig{ClusterPort: -1}
			if i > 0 {
				cfg.Routes = []string{first}
			}
			srv, err := natsplane.StartServer(cfg)
			if err != nil {
				stopAll()
				return nil, nil, err
			}
			if i == 0 {
				first = srv.ClusterURL()
			}
			r, err := startReplica(append([]string{"--host", "127.0.0.1", "--port", "0"}, args...), natsBus(srv), false)
			if err != nil {
				_ = srv.Close()
				stopAll()
				return nil, nil, err
			}
			reps = append(reps, r)
		}
		for _, r := range reps {
			if err := r.nats.bk.Start(r.nats.link.Conn(), r.applier); err != nil {
				stopAll()
				return nil, nil, err
			}
		}
		if err := awaitNATS(reps, meshWait); err != nil {
			stopAll()
			return nil, nil, err
		}
		out := make([]bench.Replica, n)
		for i, r := range reps {
			out[i] = bench.Replica{URL: r.url, Probe: r.applier}
		}
		return out, stopAll, nil
	}
}

// natsBus is the replicaBus of a replica on srv: the server (stopped
// last), a connection to it and Bookings (started by the caller).
func natsBus(srv *natsplane.Server) replicaBus {
	return func(r *replica, opts *serveOptions) (core.ReplicaSink, error) {
		r.n.onStop("embedded NATS server", srv.Close)
		quiet := slog.New(slog.DiscardHandler)
		link, err := natsplane.DialInProcess(srv, "kvselect-bench", quiet)
		if err != nil {
			return nil, err
		}
		r.n.onStopDo("NATS connection", link.Close)
		nr := &benchNATS{srv: srv, link: link}
		if _, err := link.Conn().Subscribe(benchReadySubject, func(m *nats.Msg) {
			if len(m.Data) == 1 && m.Data[0] < 64 {
				nr.pings.Or(1 << m.Data[0])
			}
		}); err != nil {
			return nil, err
		}
		if nr.bk, err = natsplane.NewBookings(natsplane.BookingsConfig{Scope: benchScope, NoSnapshot: opts.noReplicaSnapshot, Logger: quiet}); err != nil {
			return nil, err
		}
		r.n.onStop("NATS bookings", nr.bk.Close)
		r.nats = nr
		return nr.bk, nil
	}
}

// awaitNATS waits until every replica received a ping from every other
// (each publishes one every 20 ms until then), for at
// most wait. (Server.NumRoutes counts pooled route connections, several
// per peer, so it cannot say the cluster is whole.)
func awaitNATS(reps []*replica, wait time.Duration) error {
	if len(reps) > 64 {
		return errors.New("at most 64 NATS replicas")
	}
	all := uint64(1)<<len(reps) - 1
	for i, r := range reps {
		r.nats.pings.Or(1 << i) // its own never come back (NoEcho)
	}
	deadline := time.Now().Add(wait)
	for {
		for i, r := range reps {
			if err := r.nats.link.Conn().Publish(benchReadySubject, []byte{byte(i)}); err != nil {
				return err
			}
		}
		time.Sleep(20 * time.Millisecond)
		ready := true
		for _, r := range reps {
			ready = ready && r.nats.pings.Load() == all
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("NATS replicas not connected after " + wait.String())
		}
	}
}

// natsCounters adds a bench replica's event-plane counters to c, named
// after their /metrics series.
func natsCounters(nr *benchNATS, c map[string]uint64) {
	st := nr.bk.Stats()
	c["nats_published"], c["nats_publish_errors"], c["nats_outbound_dropped"] = st.Published, st.PublishErrors, st.OutboundDropped
	c["nats_received"], c["nats_skipped_own"], c["nats_applied"], c["nats_slow_consumer_drops"] = st.Received, st.SkippedOwn, st.Applied, st.SlowConsumerDrops
	c["nats_batches"], c["nats_batch_events"], c["nats_batches_received"], c["nats_batch_publish_errors"] = st.Batches, st.BatchEvents, st.BatchesReceived, st.BatchPublishErrors
	for d, v := range st.Dropped {
		c[fmt.Sprintf("nats_dropped_%s", natsplane.BookingDrop(d))] = v
	}
}
