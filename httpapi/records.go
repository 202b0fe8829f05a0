package httpapi

import "github.com/kvselect/kvselect/core"

// workerJSON is a catalog record with its listener states.
type workerJSON struct {
	core.WorkerRecord
	Listeners []listenerJSON `json:"kv_event_listeners,omitempty"`
}

type listenerJSON struct {
	DPRank    uint32  `json:"dp_rank"`
	Endpoint  string  `json:"endpoint"`
	State     string  `json:"state"`
	LastSeq   *uint64 `json:"last_seq"`
	LastError string  `json:"last_error,omitempty"`
	Batches   uint64  `json:"batches"`
	Gaps      uint64  `json:"gaps"`
	Replays   uint64  `json:"replays"`
	Restarts  uint64  `json:"restarts"`
}

func toWorkerJSON(r core.WorkerRecord) workerJSON {
	w := workerJSON{WorkerRecord: r}
	for _, l := range r.Listeners {
		lj := listenerJSON{DPRank: l.DPRank, Endpoint: l.Endpoint, State: l.State, LastError: l.LastError, Batches: l.Batches, Gaps: l.Gaps, Replays: l.Replays, Restarts: l.Restarts}
		if l.HasSeq {
			seq := l.LastSeq
			lj.LastSeq = &seq
		}
		w.Listeners = append(w.Listeners, lj)
	}
	return w
}

type readinessBody struct {
	Ready              bool           `json:"ready"`
	SchedulableWorkers int            `json:"schedulable_workers"`
	Workers            []workerJSON   `json:"workers"`
	Recovery           *core.Recovery `json:"recovery,omitempty"`
	EventPlane         any            `json:"event_plane,omitempty"`
	// NotReadyReason is Config.ReadyCheck's error (kvselect's EPP), empty
	// when the host is ready.
	NotReadyReason string `json:"not_ready_reason,omitempty"`
}

func readinessJSON(r core.Readiness) readinessBody {
	b := readinessBody{Ready: r.Ready, SchedulableWorkers: r.SchedulableWorkers, Workers: make([]workerJSON, len(r.Workers)), Recovery: r.Recovery, EventPlane: r.EventPlane}
	for i := range r.Workers {
		b.Workers[i] = toWorkerJSON(r.Workers[i])
	}
	return b
}
