//go:build !invariants

package sched

// invariants is off in normal builds; see invariants_on.go.
const invariants = false
