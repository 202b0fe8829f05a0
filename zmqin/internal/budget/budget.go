// Package budget holds the lock-free budget check of the zmqin packages'
// bounded queues: the KV-event ingress's rank queues (messages and payload
// bytes), the replica mesh's outbound and inbound queues, and each PUB
// peer's queue (zmqin/zmtp), all counted in atomics that concurrent
// producers reserve from before queueing.
package budget

import "sync/atomic"

// Reserve adds n to c unless that would take it above limit, and reports
// whether it did.
func Reserve(c *atomic.Int64, n, limit int64) bool {
	for {
		cur := c.Load()
		if cur+n > limit {
			return false
		}
		if c.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}
