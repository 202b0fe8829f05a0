package core

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// AffinityStats are the session tables' gauges and counters.
type AffinityStats struct {
	// Tables is the partitions with a table; Entries their entries (an
	// initializing session included), EntryLimit one table's cap, and
	// SessionIDLimit the longest session id in bytes.
	Tables                int
	Entries, EntryLimit   int64
	SessionIDLimit        int64
	Binds, Rebinds        uint64
	Invalidated, Rejected uint64
	FullTable, Reaped     uint64
	Published             uint64
	Applied               [NumAffinityApply]uint64
}

// AffinityStats sums the tables.
func (s *Service) AffinityStats() AffinityStats {
	a := &s.affinityStats
	st := AffinityStats{
		EntryLimit: int64(cmp.Or(s.cfg.MaxAffinityEntries, MaxSessionAffinityEntries)), SessionIDLimit: MaxSessionIDBytes,
		Binds: a.binds.Load(), Rebinds: a.rebinds.Load(), Invalidated: a.invalidated.Load(), Rejected: a.rejected.Load(),
		FullTable: a.fullTable.Load(), Reaped: a.reaped.Load(), Published: a.published.Load(),
	}
	for k := range st.Applied {
		st.Applied[k] = a.applied[k].Load()
	}
	for _, p := range *s.parts.Load() {
		if p.affinity != nil {
			st.Tables++
			st.Entries += p.affinity.count.Load()
		}
	}
	return st
}

// QueueStats are the router queues' gauges and counters.
type QueueStats struct {
	// Depth is the requests waiting now, over every partition.
	Depth int64
	// Enqueued, Dispatched and Cancelled count waits; Rejected the
	// enqueues refused at a cap, by sched.QueueLimitKind; Refreshed the
	// dequeue-time overlap refreshes.
	Enqueued, Dispatched, Cancelled uint64
	Rejected                        [sched.NumQueueLimitKinds]uint64
	Refreshed                       uint64
	// WaitSeconds is the total wait of the dispatched requests;
	// WaitBuckets counts them by QueueWaitBounds (the last is +Inf).
	WaitSeconds float64
	WaitBuckets [len(QueueWaitBounds) + 1]uint64
	// Classes are every queueing partition's classes, sorted.
	Classes []QueueClassStats
}

// QueueClassStats is one class of one partition: what waits, and its caps
// at the partition's current worker count (-1: none).
type QueueClassStats struct {
	ModelName, RoutingGroup, Class       string
	Requests, RawISLTokens, CachedTokens int64
	Limits                               [sched.NumQueueLimitKinds]int64
	// Rejected counts the class's enqueues refused at each limit kind.
	Rejected [sched.NumQueueLimitKinds]uint64
}

// QueueStats reads the queues (each under its mutex, briefly).
func (s *Service) QueueStats() QueueStats {
	c := &s.queueStats
	st := QueueStats{
		Enqueued: c.enqueued.Load(), Dispatched: c.dispatched.Load(), Cancelled: c.cancelled.Load(), Refreshed: c.refreshed.Load(),
		WaitSeconds: time.Duration(c.waitNanos.Load()).Seconds(),
	}
	for k := range st.Rejected {
		st.Rejected[k] = c.rejected[k].Load()
	}
	for k := range st.WaitBuckets {
		st.WaitBuckets[k] = c.waitBuckets[k].Load()
	}
	for _, p := range *s.parts.Load() {
		q := p.queue
		if q == nil {
			continue
		}
		st.Depth += q.waiting.Load()
		workers := int64(len(p.snap.Load().workers))
		q.mu.Lock()
		for i := range q.profile.Classes {
			cl := &q.profile.Classes[i]
			u := q.mu.q.Stats(i)
			cs := QueueClassStats{ModelName: p.model, RoutingGroup: p.group, Class: cl.Name, Requests: u.Requests, RawISLTokens: u.RawISLTokens, CachedTokens: u.CachedTokens}
			for k, l := range [...]*int64{cl.RequestLimitPerWorker, cl.RawISLLimitPerWorker, cl.CachedTokLimitPerWorker} {
				cs.Limits[k] = -1
				if l != nil {
					cs.Limits[k] = *l * workers
				}
			}
			for k := range cs.Rejected {
				cs.Rejected[k] = q.rejected[i][k].Load()
			}
			st.Classes = append(st.Classes, cs)
		}
		q.mu.Unlock()
	}
	slices.SortFunc(st.Classes, func(a, b QueueClassStats) int {
		return cmp.Or(cmp.Compare(a.ModelName, b.ModelName), cmp.Compare(a.RoutingGroup, b.RoutingGroup), cmp.Compare(a.Class, b.Class))
	})
	return st
}

// QueueLimitKindName names Stats' rejection kinds (sched.QueueLimitKind).
func QueueLimitKindName(k int) string { return sched.QueueLimitKind(k).String() }
