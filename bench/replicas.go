package bench

import (
	"fmt"
	"io"
	"time"
)

// Replica is one in-process selector of a replica run (Config.Replicas),
// as Config.StartReplicas returns it.
type Replica struct {
	// URL is the base URL of its HTTP server.
	URL string
	// PprofURL is the pprof base of the process serving it
	// ("http://host:port/debug/pprof"), "" when it serves none. In-process
	// replicas share one process, and so one debug listener.
	PprofURL string
	// Probe is its Go-API side, for the propagation probe.
	Probe ReplicaProbe
}

// ReplicaChange is a peer's change to a booking that a replica applies.
type ReplicaChange uint8

const (
	// ChangeBooked is a peer's admission: the booking becomes a mirrored
	// reservation here.
	ChangeBooked ReplicaChange = iota
	// ChangeFreed is a peer's free of a booking mirrored here.
	ChangeFreed
)

// ReplicaProbe is what the propagation probe reads of one replica through
// the Go API, without HTTP; the host implements it around the replica's
// service and mesh. Its methods are safe for concurrent use.
type ReplicaProbe interface {
	// Arm watches for a peer's change of kind to booking id: applied
	// receives, once, the time at which this replica finished applying it
	// (from then on every call sees it). Arm before causing the change;
	// call disarm when done, whether or not it fired.
	Arm(id string, kind ReplicaChange) (applied <-chan time.Time, disarm func())
	// ArmSent watches for this replica's own change of kind to booking id
	// (one it booked or freed): sent receives, once, the time at which the
	// replica handed the change to its bus. Arm before causing the change;
	// call disarm when done.
	ArmSent(id string, kind ReplicaChange) (sent <-chan time.Time, disarm func())
	// Mirror reports the worker of id's live reservation here when a peer
	// booked it (a mirror); ok is false when there is none.
	Mirror(id string) (worker uint64, ok bool)
	// Counters are the replica's mesh and apply counters worth reading
	// after a run (events published, received, applied, dropped by
	// reason), named as its metrics are.
	Counters() map[string]uint64
}

// ReplicaReport is the replica section of a Report: the load spread over
// Replicas meshed replicas (the Report's top-level figures) against one
// replica alone, driven by the same client in the same run.
type ReplicaReport struct {
	Replicas int `json:"replicas"`
	// Rounds is the number of alternating windows each target was
	// measured in (Config.Rounds).
	Rounds int `json:"rounds"`
	// Single is one replica with no mesh, same workers, engines, fill and
	// load; SingleLeaked its reservations left active.
	Single       *Result `json:"single_replica"`
	SingleLeaked int64   `json:"single_replica_leaked_reservations"`
	// ThroughputRatio and P99Ratio are the replicas' requests/s and p99
	// over Single's.
	ThroughputRatio float64 `json:"throughput_ratio"`
	P99Ratio        float64 `json:"p99_ratio"`
	// PerCPURatio is the replicas' requests per second of process CPU
	// over Single's: what the mesh costs per request, whatever share of
	// the machine each configuration got (on a machine shared with other
	// work, ThroughputRatio also moves with the others' load between the
	// two windows; this moves much less). 0 when the CPU is unknown.
	PerCPURatio float64 `json:"per_cpu_ratio"`
	// Propagation is what the probe measured during the replicas' window.
	Propagation *Propagation `json:"propagation"`
	// Counters are each replica's (ReplicaProbe.Counters), read after the
	// run, in replica order.
	Counters []map[string]uint64 `json:"replica_counters"`
	// Alt is the replicas over the other bus (Config.StartAltReplicas),
	// nil without.
	Alt *AltReplicaReport `json:"alt,omitempty"`
}

// AltReplicaReport is the same number of replicas meshed over another bus
// (the NATS event plane), measured in the same rounds as the ZMQ mesh.
type AltReplicaReport struct {
	Label  string  `json:"label"`
	Result *Result `json:"result"`
	Leaked int64   `json:"leaked_reservations"`
	// ThroughputRatio, P99Ratio and PerCPURatio are against the one
	// replica, as ReplicaReport's; ThroughputToMesh against the ZMQ
	// mesh's replicas.
	ThroughputRatio  float64             `json:"throughput_ratio"`
	P99Ratio         float64             `json:"p99_ratio"`
	PerCPURatio      float64             `json:"per_cpu_ratio"`
	ThroughputToMesh float64             `json:"throughput_to_mesh"`
	Propagation      *Propagation        `json:"propagation"`
	Counters         []map[string]uint64 `json:"replica_counters"`
}

// Replica targets of this harness on this machine: the mesh costs at most
// a fifth of one replica's throughput, and a booking is visible on the
// other replica within 10 ms at the 99th percentile.
const (
	replicaMinThroughput = 0.8
	replicaMaxLagP99Ms   = 10.0
)

// writeReplicaSection prints rr under the main table.
func writeReplicaSection(out *reportWriter, rep *Report) {
	rr := rep.Replicas
	if rr == nil {
		return
	}
	s := rr.Single
	out.printf("\n%d replicas meshed over loopback ZMQ (operations alternate between them; an operation's calls go to the replica that booked it)\n", rr.Replicas)
	out.printf("against 1 replica, same client, same run, %d alternating windows each: requests/s %.0f vs %.0f (ratio %.2f), p99 %.3f vs %.3f ms (ratio %.2f), errors %d vs %d, leaked %d vs %d\n",
		rr.Rounds, rep.ThroughputRPS, s.ThroughputRPS, rr.ThroughputRatio, rep.P99ms, s.P99ms, rr.P99Ratio,
		rep.ErrorCount(), s.ErrorCount(), rep.LeakedReservations, rr.SingleLeaked)
	out.printf("process CPU %.2f vs %.2f cores; requests per CPU-second ratio %.2f\n",
		rep.Client.ProcessCPUCores, s.Client.ProcessCPUCores, rr.PerCPURatio)
	if pr := rr.Propagation; pr != nil {
		writePropagation(out, pr)
		if len(pr.Errors) > 0 {
			out.printf("  probe call errors by class: %s\n", formatCounts(pr.Errors))
		}
		if rep.Loop == "closed" {
			out.printf("targets (replicas): throughput ratio to 1 replica %.2f (>= %.2f %s), propagation p99 %.3f ms (< %.0f ms %s), not visible %d (%s)\n",
				rr.ThroughputRatio, replicaMinThroughput, okIf(rr.ThroughputRatio >= replicaMinThroughput),
				pr.BookedP99ms, replicaMaxLagP99Ms, okIf(pr.BookedP99ms < replicaMaxLagP99Ms && pr.Probes > 0),
				pr.NotVisible, okIf(pr.NotVisible == 0))
		} else {
			writeOpenLagTarget(out, "replicas", pr)
		}
	}
	writeCounters(out, rr.Counters)
	if a := rr.Alt; a != nil {
		r := a.Result
		out.printf("\n%d replicas over %s, same client, same rounds: requests/s %.0f (ratio %.2f to 1 replica, %.2f to the ZMQ mesh), p99 %.3f ms (ratio %.2f), errors %d, leaked %d\n",
			rr.Replicas, a.Label, r.ThroughputRPS, a.ThroughputRatio, a.ThroughputToMesh, r.P99ms, a.P99Ratio, r.ErrorCount(), a.Leaked)
		out.printf("process CPU %.2f cores; requests per CPU-second ratio %.2f\n", r.Client.ProcessCPUCores, a.PerCPURatio)
		if pr := a.Propagation; pr != nil {
			writePropagation(out, pr)
			if rep.Loop == "closed" {
				out.printf("targets (%s): throughput ratio to 1 replica %.2f (>= %.2f %s), to the ZMQ mesh %.2f (>= 1 %s), propagation p99 %.3f ms (< %.0f ms %s), not visible %d (%s)\n",
					a.Label, a.ThroughputRatio, replicaMinThroughput, okIf(a.ThroughputRatio >= replicaMinThroughput),
					a.ThroughputToMesh, okIf(a.ThroughputToMesh >= 1),
					pr.BookedP99ms, replicaMaxLagP99Ms, okIf(pr.BookedP99ms < replicaMaxLagP99Ms && pr.Probes > 0),
					pr.NotVisible, okIf(pr.NotVisible == 0))
			} else {
				writeOpenLagTarget(out, a.Label, pr)
			}
		}
		writeCounters(out, a.Counters)
	}
}

// writeOpenLagTarget prints the lag target of an open-loop run: below
// saturation the lag is the bus's own, where in a saturated closed loop
// every hop of it (as of every request) also waits its turn behind the
// runnable handlers on the machine's cores.
func writeOpenLagTarget(out *reportWriter, label string, pr *Propagation) {
	out.printf("targets (%s, open loop): propagation p99 %.3f ms (< %.0f ms %s), not visible %d (%s)\n",
		label, pr.BookedP99ms, replicaMaxLagP99Ms, okIf(pr.BookedP99ms < replicaMaxLagP99Ms && pr.Probes > 0),
		pr.NotVisible, okIf(pr.NotVisible == 0))
}

// writePropagation prints a probe's lags.
func writePropagation(out *reportWriter, pr *Propagation) {
	out.printf("propagation (%s), %d probes:\n", pr.Method, pr.Probes)
	out.printf("  booked: p50 %.3f ms, p99 %.3f ms, max %.3f ms (%d applied before the booking's response arrived); not visible %d\n",
		pr.BookedP50ms, pr.BookedP99ms, pr.BookedMaxMs, pr.AppliedBeforeResponse, pr.NotVisible)
	out.printf("  freed:  p50 %.3f ms, p99 %.3f ms, max %.3f ms; not freed %d\n", pr.FreedP50ms, pr.FreedP99ms, pr.FreedMaxMs, pr.NotFreed)
	if pr.NotSent > 0 {
		out.printf("  answered but never published by the booking replica: %d\n", pr.NotSent)
	}
}

// writeCounters prints each replica's counters.
func writeCounters(out *reportWriter, counters []map[string]uint64) {
	for i, c := range counters {
		m := make(map[string]int64, len(c))
		for k, v := range c {
			m[k] = int64(v)
		}
		out.printf("replica %d counters: %s\n", i, formatCounts(m))
	}
}

// reportWriter is an io.Writer that keeps its first error.
type reportWriter struct {
	w   io.Writer
	err error
}

func (r *reportWriter) printf(format string, a ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format, a...)
	}
}

// multiCaller spreads one client goroutine's operations over replicas:
// each operation's first call (route.selection) goes to the next replica
// in turn, and its other calls to the same one, the replica that booked
// it. (Any replica of a mesh would accept them, the booking being mirrored
// everywhere, but only after the admission reached it; a caller keeps a
// request on the replica that answered its booking.)
type multiCaller struct {
	cs        []*httpCaller
	cur, next int
}

func (m *multiCaller) call(r route, id, body []byte) (int, error) {
	if r.selection() {
		m.cur = m.next
		m.next = (m.next + 1) % len(m.cs)
	}
	return m.cs[m.cur].call(r, id, body)
}

// overlapTokens reads the last response of the replica called last.
func (m *multiCaller) overlapTokens() (int64, bool) { return m.cs[m.cur].overlapTokens() }

// settleActive sums active requests over ctls until the sum is 0 or wait
// has passed (a replica's mirrors are freed when its peer's free arrives,
// after the load has ended), polling every 10 ms; it returns the last sum.
func settleActive(ctls []*Control, wait time.Duration) (int64, error) {
	deadline := time.Now().Add(wait)
	for {
		var sum int64
		for _, c := range ctls {
			n, err := c.ActiveRequests()
			if err != nil {
				return 0, err
			}
			sum += n
		}
		if sum == 0 || !time.Now().Before(deadline) {
			return sum, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}
