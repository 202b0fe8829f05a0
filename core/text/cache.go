package text

import (
	"strings"
	"sync"
)

// idCache remembers the ids of texts the tokenizer encoded: pre-tokens
// (the word cache: a conversation's earlier turns and a shared system
// prompt split into the same pre-tokens again) or chunks of long segments
// (the chunk cache, chunks.go). It is bounded: limit bytes over its shards,
// a shard past its share emptied, and keys of at most maxKey bytes. The
// zero value is unusable; limit and maxKey are set once, at Load.
type idCache struct {
	shards        [cacheShards]cacheShard
	hits          [cacheShards]paddedCount
	limit, maxKey int
}

const (
	cacheShards = 16
	// The word cache: 8 MiB of pre-tokens of at most 64 bytes.
	wordCacheBytes = 8 << 20
	wordCacheKey   = 64
	// The chunk cache: 32 MiB of chunks of at most maxChunk bytes.
	chunkCacheBytes = 32 << 20
)

type cacheShard struct {
	mu    sync.Mutex
	m     map[string][]uint32
	bytes int
	_     [40]byte
}

type paddedCount struct {
	hits, misses uint64
	_            [48]byte
}

// shardOf hashes a key's length and at most 16 bytes at each end (FNV-1a):
// cheap for a chunk of a kilobyte, and enough to spread keys.
func shardOf(s string) int {
	h := (uint32(2166136261) ^ uint32(len(s))) * 16777619
	head, tail := s, ""
	if len(s) > 32 {
		head, tail = s[:16], s[len(s)-16:]
	}
	for i := 0; i < len(head); i++ {
		h = (h ^ uint32(head[i])) * 16777619
	}
	for i := 0; i < len(tail); i++ {
		h = (h ^ uint32(tail[i])) * 16777619
	}
	return int(h % cacheShards)
}

func (c *idCache) get(key string) ([]uint32, bool) {
	if len(key) > c.maxKey {
		return nil, false
	}
	i := shardOf(key)
	sh := &c.shards[i]
	sh.mu.Lock()
	ids, ok := sh.m[key]
	if ok {
		c.hits[i].hits++
	} else {
		c.hits[i].misses++
	}
	sh.mu.Unlock()
	return ids, ok
}

func (c *idCache) put(key string, ids []uint32) {
	if len(key) > c.maxKey {
		return
	}
	sh := &c.shards[shardOf(key)]
	cost := len(key) + 4*len(ids) + 64 // key, ids, map entry overhead
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil || sh.bytes+cost > c.limit/cacheShards {
		sh.m, sh.bytes = make(map[string][]uint32, 256), 0
	}
	if _, ok := sh.m[key]; ok {
		return
	}
	sh.m[strings.Clone(key)] = append([]uint32(nil), ids...)
	sh.bytes += cost
}

// CacheStats are a cache's counters and size.
type CacheStats struct {
	Hits, Misses uint64
	Bytes, Limit int
}

func (c *idCache) stats() CacheStats {
	st := CacheStats{Limit: c.limit}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.Hits += c.hits[i].hits
		st.Misses += c.hits[i].misses
		st.Bytes += sh.bytes
		sh.mu.Unlock()
	}
	return st
}
