package core

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"
	"lukechampine.com/blake3"
)

// TrackingHash selects how tracking (sequence) hashes are derived from a
// request's token_ids: public-xxh3-v1 (the zero value: the public chain
// of the local block hashes) or keyed-xxh3-v1, Dynamo's provider-keyed
// derivation (ai-dynamo/dynamo:lib/kv-router/src/tracking_hash.rs).
//
// In keyed mode the tracking identities cannot be computed without the
// key: two seeds come from a keyed BLAKE3 of a domain string and a framed
// scope (key id, model, routing group, block size, cache salt, LoRA name,
// eagle), the blocks are XXH3-hashed with the first seed (instead of the
// salt seed) and chained with the second (instead of 1337). The local
// block hashes used for index lookups stay public; precomputed hashes
// (block_hashes, sequence_hashes) are trusted as given.
type TrackingHash struct {
	// Keyed selects keyed-xxh3-v1.
	Keyed bool
	// Key is the 32-byte provider key (keyed mode only).
	Key []byte
	// KeyID is the provider-managed key epoch (keyed mode only).
	KeyID string
}

// TrackingKeySize is the length of a keyed-xxh3-v1 provider key.
const TrackingKeySize = 32

// Validate reports the reference's configuration errors.
func (t *TrackingHash) Validate() error {
	switch {
	case !t.Keyed && (t.Key != nil || t.KeyID != ""):
		return fmt.Errorf("%w: router tracking key options require router_tracking_hash=keyed-xxh3-v1", ErrConfig)
	case !t.Keyed:
		return nil
	case t.Key == nil:
		return fmt.Errorf("%w: keyed-xxh3-v1 requires router_tracking_key_file", ErrConfig)
	case t.KeyID == "" || strings.TrimSpace(t.KeyID) != t.KeyID:
		return fmt.Errorf("%w: keyed-xxh3-v1 requires a nonempty router_tracking_key_id", ErrConfig)
	case len(t.Key) != TrackingKeySize:
		return fmt.Errorf("%w: router tracking key file must contain exactly %d raw bytes; found %d", ErrConfig, TrackingKeySize, len(t.Key))
	}
	return nil
}

// keyedDomain separates keyed-xxh3-v1 from every other use of the key.
const keyedDomain = "dynamo.router.tracking-hash/keyed-xxh3-v1\x00"

// keyedHasher derives keyed-xxh3-v1 seeds. One per scratch: it is not
// safe for concurrent use, and derives without allocating.
type keyedHasher struct {
	h     *blake3.Hasher
	keyID string
	msg   []byte
	sum   [32]byte
}

func newKeyedHasher(t *TrackingHash) *keyedHasher {
	return &keyedHasher{h: blake3.New(32, t.Key), keyID: t.KeyID}
}

// trackingScope is what a keyed seed pair depends on besides the key.
type trackingScope struct {
	model, group string
	blockSize    uint32
	salt, lora   string // empty means absent
	eagle        bool
}

// seeds returns the block seed and the chain seed of scope: the first 16
// bytes of keyed BLAKE3(domain, frames 1 to 7), as two little-endian u64.
// A frame is tag, u64 LE length, bytes; an optional frame is tag, 0 or 1,
// then length and bytes when present.
func (k *keyedHasher) seeds(sc *trackingScope) (block, chain uint64) {
	m := append(k.msg[:0], keyedDomain...)
	m = frame(m, 1, k.keyID)
	m = frame(m, 2, sc.model)
	m = frame(m, 3, sc.group)
	m = append(m, 4)
	m = binary.LittleEndian.AppendUint64(m, 4)
	m = binary.LittleEndian.AppendUint32(m, sc.blockSize)
	m = optionalFrame(m, 5, sc.salt)
	m = optionalFrame(m, 6, sc.lora)
	m = append(m, 7)
	m = binary.LittleEndian.AppendUint64(m, 1)
	m = append(m, boolByte(sc.eagle))
	k.msg = m
	k.h.Reset()
	_, _ = k.h.Write(m)
	sum := k.h.Sum(k.sum[:0])
	return binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func frame(m []byte, tag byte, v string) []byte {
	m = append(m, tag)
	m = binary.LittleEndian.AppendUint64(m, uint64(len(v)))
	return append(m, v...)
}

func optionalFrame(m []byte, tag byte, v string) []byte {
	if v == "" {
		return append(m, tag, 0)
	}
	m = append(m, tag, 1)
	m = binary.LittleEndian.AppendUint64(m, uint64(len(v)))
	return append(m, v...)
}

// keyedSequence appends the keyed tracking hashes of toks: the canonical
// blocks (eagle windows and multimodal hashes as localHashes) hashed with
// the block seed, chained with the chain seed (seq[0] = block[0]).
func (k *keyedHasher) keyedSequence(dst []uint64, sc *trackingScope, toks []uint32, mm [][]uint64, buf *[]byte) []uint64 {
	block, chain := k.seeds(sc)
	start := len(dst)
	dst = localHashes(dst, toks, int(sc.blockSize), block, sc.eagle, mm, buf)
	var b [16]byte
	for i := start + 1; i < len(dst); i++ {
		binary.LittleEndian.PutUint64(b[:8], dst[i-1])
		binary.LittleEndian.PutUint64(b[8:], dst[i])
		dst[i] = xxh3.HashSeed(b[:], chain)
	}
	return dst
}
