package sched

// Admission is the seam for the router queue (the open queueing issue),
// which this package does not implement yet: after the candidates are
// filled (step 3 of the package contract) the host asks whether to dispatch
// now or park the request until a prefill completion, a release or a
// topology change (ai-dynamo/dynamo:lib/kv-router/src/scheduling/queue.rs). The future implementation owns
// router_queue_threshold, policy classes (FCFS, LCFS, WSPT), per-class caps
// and per-worker lanes; busy workers are those with A_p > threshold ×
// PrefillCapacity(max_num_batched_tokens).
type Admission interface {
	// Admit reports whether the request may be scored and booked now.
	Admit(req *Request, cands []Candidate) bool
}

// AdmitAll is the default Admission: queueing off (Dynamo's default since
// #11599), every request is dispatched immediately.
type AdmitAll struct{}

func (AdmitAll) Admit(*Request, []Candidate) bool { return true }
