// Package mpsc is a bounded queue with many writers and one reader, who
// takes everything queued at once.
//
// It replaces a buffered channel where the bound is large (the replica
// mesh's 100,000 events) and the queue is usually short: a channel
// allocates its whole ring up front and walks it, so every send lands on
// a slot last touched 100,000 sends ago, a cache miss (about 1 us a send
// in kvselect bench's replica profile). Queue's two slices grow only to
// the longest burst and are reused from the front, so a short queue stays
// in cache.
package mpsc
