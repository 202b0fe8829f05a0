//go:build invariants

package radix

// invariants turns on the consistency checks of invariants.go after
// mutations: of a Tree (checkTree), of a shard's lower tiers and counts,
// and of an Approx's timers, each bounded by checkBudget (make test builds
// with -tags invariants).
const invariants = true
