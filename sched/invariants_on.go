//go:build invariants

package sched

// invariants turns on the O(trie size) consistency check after every trie
// mutation (make test builds with -tags invariants).
const invariants = true
