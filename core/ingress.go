package core

import "github.com/kvselect/kvselect/radix"

// RankSource is where one data-parallel rank of a worker publishes its KV
// events.
type RankSource struct {
	DPRank uint32
	// Endpoint is the ZMQ PUB address the rank publishes on (the worker's
	// kv_events_endpoints entry for this rank), e.g. "tcp://10.0.0.7:5557".
	Endpoint string
	// ReplayEndpoint is the rank's ROUTER replay address; empty when the
	// worker has none. Only honoured for data_parallel_size 1.
	ReplayEndpoint string
}

// EventSink receives a worker's decoded KV events. core implements it for
// each partition on top of the partition's radix.Index.
type EventSink interface {
	// ApplyBatch applies events in order. Events of one worker arrive from
	// one goroutine at a time. The slice and its contents belong to the
	// caller and are not retained.
	ApplyBatch(evs []radix.Event)
	// ClearRank drops everything one worker rank holds, in every tier (used
	// when a publisher restart is detected).
	ClearRank(w radix.WorkerKey)
}

// RankStatus is the observable state of one rank's listener, reported in
// GET /workers.
type RankStatus struct {
	DPRank   uint32
	Endpoint string
	// State is one of "connecting", "live", "replaying", "stopped".
	State string
	// LastSeq is the last sequence number applied; HasSeq is false before
	// the first batch.
	LastSeq uint64
	HasSeq  bool
	// LastError is the most recent dial, receive or decode error, if any.
	LastError string
	Batches   uint64
	Gaps      uint64
	Replays   uint64
	Restarts  uint64
}

// Ingress attaches KV-event listeners to workers' ranks. zmqin implements it
// with ZeroMQ SUB sockets; NopIngress is the stand-in when KV events are
// off. All methods are safe for concurrent use.
type Ingress interface {
	// Sync makes worker workerID's listeners match ranks exactly,
	// reconciling rank by rank: a rank whose endpoint (and replay endpoint)
	// is unchanged keeps its listener, watermark and blocks; a changed one
	// gets a fresh listener and watermark (its old blocks are cleared
	// through sink); a rank no longer listed is stopped and cleared. A
	// different sink or block size than the previous Sync (the worker moved
	// partitions) restarts every rank.
	Sync(workerID uint64, blockSize int, ranks []RankSource, sink EventSink)
	// Detach stops every listener of the worker. It returns only when no
	// further event of the worker will reach its sink, so the caller may
	// then drop the worker's blocks without a late batch restoring them.
	Detach(workerID uint64)
	// Status appends the state of each of the worker's rank listeners, by
	// rank, to dst.
	Status(workerID uint64, dst []RankStatus) []RankStatus
	// Close stops everything; it returns when every goroutine has exited.
	Close() error
}

// NopIngress attaches nothing: a selector without KV events (or a test).
type NopIngress struct{}

func (NopIngress) Sync(uint64, int, []RankSource, EventSink)      {}
func (NopIngress) Detach(uint64)                                  {}
func (NopIngress) Status(_ uint64, dst []RankStatus) []RankStatus { return dst }
func (NopIngress) Close() error                                   { return nil }
