package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// inProcessReplicas returns the bench.Config.StartReplicas hook of `kvselect
// bench --replicas N`: n kvselect replicas in this process, configured from
// serve's flags (args) and this process's DYN_* environment like the
// single in-process server (inprocess.go), each with its own core.Service,
// KV-event ingress, sweep and HTTP server on a free loopback port. With
// n > 1 each also has a mesh.Mesh publishing on tcp://127.0.0.1:0, every
// other replica registered as its peer (Mesh.Register), and the hook
// returns only once every replica is connected to and subscribed by every
// other: a PUB drops what it publishes before a subscription, and a
// booking lost that way would show as a leak, not as lag. With profile,
// one debug listener on a free loopback port serves this process's pprof
// (every replica's Replica.PprofURL) until stop.
func inProcessReplicas(profile bool, args ...string) func(n int) ([]bench.Replica, func(), error) {
	return func(n int) ([]bench.Replica, func(), error) {
		reps := make([]*replica, 0, n)
		var debug *debugListener
		quiet := slog.New(slog.DiscardHandler)
		stopAll := func() {
			for i := len(reps) - 1; i >= 0; i-- {
				reps[i].stop()
			}
			debug.stop(quiet)
		}
		if profile {
			var err error
			if debug, err = startDebug("127.0.0.1:0", true, quiet); err != nil {
				return nil, nil, err
			}
		}
		for range n {
			var bus replicaBus
			if n > 1 {
				bus = meshBus
			}
			r, err := startReplica(append([]string{"--host", "127.0.0.1", "--port", "0"}, args...), bus, profile)
			if err != nil {
				stopAll()
				return nil, nil, err
			}
			reps = append(reps, r)
		}
		if n > 1 {
			for i, r := range reps {
				if err := r.mesh.Start(r.applier); err != nil {
					stopAll()
					return nil, nil, err
				}
				for j, peer := range reps {
					if j == i {
						continue
					}
					if _, err := r.mesh.Register(peer.mesh.Endpoint()); err != nil {
						stopAll()
						return nil, nil, err
					}
				}
			}
			if err := awaitMesh(reps, meshWait); err != nil {
				stopAll()
				return nil, nil, err
			}
		}
		out := make([]bench.Replica, n)
		for i, r := range reps {
			out[i] = bench.Replica{URL: r.url, Probe: r.applier}
			if debug != nil {
				out[i].PprofURL = "http://" + debug.addr() + strings.TrimSuffix(perf.PprofPrefix, "/")
			}
		}
		return out, stopAll, nil
	}
}

// meshWait bounds how long inProcessReplicas waits for the replicas to
// connect to each other over loopback.
const meshWait = 10 * time.Second

// awaitMesh waits until every replica's mesh has all its peers connected
// and subscribed to it, polling every 5 ms for at most wait.
func awaitMesh(reps []*replica, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		ready := true
		for _, r := range reps {
			st := r.mesh.Stats()
			ready = ready && st.PeersLive == len(reps)-1 && st.Subscribers >= len(reps)-1
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica mesh not connected after %v", wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replica is one in-process replica: a node with the parts of `kvselect
// serve` a load run uses (no workers file, index recovery or demo
// engines), composed as serve composes them.
type replica struct {
	n       *node
	url     string
	svc     *core.Service
	mesh    *mesh.Mesh // nil alone or over NATS
	nats    *benchNATS
	applier *stampedApplier
}

// replicaBus builds a replica's replica sink (nil: alone), pushing its
// stops onto r.n.
type replicaBus func(r *replica, opts *serveOptions) (core.ReplicaSink, error)

// meshBus is the ZMQ mesh on a free loopback port, not yet started.
func meshBus(r *replica, opts *serveOptions) (core.ReplicaSink, error) {
	var err error
	if r.mesh, err = mesh.New(mesh.Config{Bind: "tcp://127.0.0.1:0"}); err != nil {
		return nil, err
	}
	r.n.onStop("replica mesh", r.mesh.Close)
	opts.http.Peers = r.mesh
	return r.mesh, nil
}

// startReplica builds and starts one replica, with bus's sink (not yet
// started) when bus is not nil; stop undoes it.
func startReplica(args []string, bus replicaBus, profile bool) (*replica, error) {
	opts, err := parseServe(args, os.LookupEnv, io.Discard)
	if err != nil {
		return nil, err
	}
	r := &replica{n: newNode("replica", slog.New(slog.DiscardHandler))}
	fail := func(err error) (*replica, error) {
		r.n.stop(0)
		return nil, err
	}
	var ingress core.Ingress = core.NopIngress{}
	if opts.core.UseKVEvents {
		zing, err := zmqin.New(zmqin.Config{Writers: opts.writers})
		if err != nil {
			return nil, err
		}
		ingress = zing
		r.n.onStop("KV-event ingress", zing.Close)
	}
	var sink core.ReplicaSink = core.NopReplicaSink{}
	r.applier = &stampedApplier{}
	if bus != nil {
		if sink, err = bus(r, opts); err != nil {
			return fail(err)
		}
		sink = &stampedSink{sink: sink, stamps: &r.applier.sent}
	}
	if r.svc, err = core.New(opts.core, core.Options{Ingress: ingress, Replica: sink}); err != nil {
		return fail(err)
	}
	r.n.onStopDo("service", r.svc.Close)
	r.applier.svc, r.applier.mesh, r.applier.nats = r.svc, r.mesh, r.nats
	opts.http.Logger = slog.New(slog.DiscardHandler)
	if profile {
		// Contention sampling is process-wide; the debug listener is
		// inProcessReplicas'.
		perf.SetContentionProfiling(opts.pprofMutexFraction, opts.pprofBlockRate)
	}
	srv, err := httpapi.New(r.svc, opts.http)
	if err != nil {
		return fail(err)
	}
	addr, err := r.n.serveHTTP(srv, opts.host, 0)
	if err != nil {
		return fail(err)
	}
	r.url = "http://" + addr.String()
	r.n.loop("sweep", func(ctx context.Context) { sweep(ctx, r.svc, core.DefaultSweepInterval) })
	return r, nil
}

// stop shuts the replica down as serve does.
func (r *replica) stop() { r.n.stop(0) }

// stampedApplier is what a replica's mesh applies peers' events through:
// the service, plus the propagation probe's stamps (bench.ReplicaProbe).
// After each batch is applied, and only while a probe is armed, the
// admissions and frees in it stamp their watches with the time the batch
// became visible. sent holds the watches of the replica's own changes,
// stamped by its stampedSink.
type stampedApplier struct {
	svc          *core.Service
	mesh         *mesh.Mesh
	nats         *benchNATS // over the NATS event plane (eventplane_bench.go)
	stamps, sent bench.ApplyStamps
}

func (a *stampedApplier) ApplyReplica(evs []core.ReplicaEvent) {
	a.svc.ApplyReplica(evs)
	if !a.stamps.Armed() {
		return
	}
	now := time.Now()
	for i := range evs {
		stampChange(&a.stamps, &evs[i], now)
	}
}

// stampChange stamps the watch of ev's change, if any, with at.
func stampChange(s *bench.ApplyStamps, ev *core.ReplicaEvent, at time.Time) {
	switch ev.Kind {
	case core.ReplicaAdd:
		s.Applied(ev.RequestID, bench.ChangeBooked, at)
	case core.ReplicaFree:
		s.Applied(ev.RequestID, bench.ChangeFreed, at)
	}
}

// stampedSink is a replica's bus as its service publishes to it, plus the
// probe's stamps of the replica's own changes (bench.ReplicaProbe.ArmSent):
// the time an admission or free was handed to the bus, read just before
// Publish (so that no peer can have applied it earlier), and only while a
// probe is armed. Publish does not say whether the bus dropped the event:
// a drop shows as not visible on the peer.
type stampedSink struct {
	sink   core.ReplicaSink
	stamps *bench.ApplyStamps
}

func (s *stampedSink) Publish(ev *core.ReplicaEvent) {
	if !s.stamps.Armed() {
		s.sink.Publish(ev)
		return
	}
	now := time.Now()
	s.sink.Publish(ev)
	stampChange(s.stamps, ev, now)
}

// CatalogVersion implements mesh.Applier.
func (a *stampedApplier) CatalogVersion() uint64 { return a.svc.CatalogVersion() }

// WorkerPartition and ReleaseMirrors implement natsplane.Applier.
func (a *stampedApplier) WorkerPartition(id uint64) (string, string, uint32, bool) {
	return a.svc.WorkerPartition(id)
}

func (a *stampedApplier) ReleaseMirrors(origin core.Origin, before time.Time, keep func(string) bool) int {
	return a.svc.ReleaseMirrors(origin, before, keep)
}

func (a *stampedApplier) AppendLocalBookings(dst []core.ReplicaEvent) []core.ReplicaEvent {
	return a.svc.AppendLocalBookings(dst)
}

// Arm implements bench.ReplicaProbe.
func (a *stampedApplier) Arm(id string, kind bench.ReplicaChange) (<-chan time.Time, func()) {
	return a.stamps.Arm(id, kind)
}

// ArmSent implements bench.ReplicaProbe.
func (a *stampedApplier) ArmSent(id string, kind bench.ReplicaChange) (<-chan time.Time, func()) {
	return a.sent.Arm(id, kind)
}

// Mirror implements bench.ReplicaProbe through core's Go API.
func (a *stampedApplier) Mirror(id string) (uint64, bool) {
	r, ok := a.svc.Reservation(id)
	if !ok || r.Origin == core.OriginLocal {
		return 0, false
	}
	return r.Worker.WorkerID, true
}

// Counters implements bench.ReplicaProbe: the mesh's and the service's
// replica counters, named after their /metrics series.
func (a *stampedApplier) Counters() map[string]uint64 {
	st := a.svc.Stats()
	c := map[string]uint64{"replica_applied": st.ReplicaApplied, "replica_freed": st.ReplicaFreed, "replica_replaced": st.ReplicaReplaced}
	for d, v := range st.ReplicaDropped {
		c["replica_dropped_"+core.ReplicaDrop(d).String()] = v
	}
	if a.nats != nil {
		natsCounters(a.nats, c)
	}
	if a.mesh != nil {
		ms := a.mesh.Stats()
		c["mesh_published"], c["mesh_outbound_dropped"], c["mesh_peer_queue_dropped"] = ms.Published, ms.OutboundDropped, ms.PeerQueueDropped
		c["mesh_received"], c["mesh_batches"] = ms.Received, ms.Batches
		for d, v := range ms.Dropped {
			c["mesh_dropped_"+mesh.Drop(d).String()] = v
		}
	}
	return c
}

var errNoReplicas = errors.New("kvselect bench: --replicas needs the in-process selector (no --target)")
