package sched

// Admission: between filling the candidates (step 3 of the package
// contract) and scoring them, a host with queueing on asks whether the
// request waits (Dynamo's SchedulerQueueActor, ai-dynamo/dynamo:
// lib/kv-router/src/scheduling/queue.rs). A request waits when its class
// queues and either the class already has a backlog (no overtaking) or the
// pool is busy: every eligible worker rank (or BusyWorkerRatio of them) is
// busy by the class's line, A_p > threshold or A_p > frac ×
// max_num_batched_tokens. A pinned request looks at its own rank only;
// with no eligible rank it never waits (it fails as having no endpoints).
// Advisory selections never wait.
//
// The waiting itself is the host's: it enqueues into a PolicyQueue
// (serialized by the host), blocks on its own channel, and is popped when
// capacity frees (a prefill completion, a release, a topology change),
// one dispatch at a time so that every pop sees the loads the previous
// booking left.

// ShouldQueue is the queue decision of a request of class c: backlog is
// whether c has waiting requests, busy of eligible ranks are busy.
func (c *PolicyClass) ShouldQueue(backlog bool, busy, eligible int) bool {
	return c.Queues() && eligible > 0 && (backlog || c.PoolBusy(busy, eligible))
}
