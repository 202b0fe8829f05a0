package main

import (
	"math/rand/v2"
	"sync"
)

// lockedRand is a seeded sched.Rand safe for concurrent use (--rand-seed):
// one PCG behind a mutex. Selections then contend on the mutex, which the
// default (sched.RuntimeRand, per-thread state) avoids; it is meant for
// reproducible runs, not for serving at full rate.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, 0x6b7673656c656374))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}
