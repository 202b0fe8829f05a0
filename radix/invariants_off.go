//go:build !invariants

package radix

// invariants is off in normal builds, where the checks' calls compile to
// nothing; see invariants_on.go.
const invariants = false
