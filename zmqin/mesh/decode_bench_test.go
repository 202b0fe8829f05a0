package mesh

import (
	"strconv"
	"testing"

	"github.com/kvselect/kvselect/core"
)

// BenchmarkDecodeEnvelopeAdd decodes one admission of a 274-block prompt
// (the bench's mean), as each replica does for every booking of its peers.
func BenchmarkDecodeEnvelopeAdd(b *testing.B) {
	hashes := make([]uint64, 274)
	for i := range hashes {
		hashes[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	ev := core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: "m", RoutingGroup: "default", BlockSize: 16,
		RequestID: "req-" + strconv.Itoa(12345), Worker: core.WorkerKey{WorkerID: 3}, SequenceHashes: hashes,
		TrackPrefillTokens: true, EffectivePrefillTokens: 4384}
	buf := AppendEnvelope(nil, &ev, 42)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var got core.ReplicaEvent
	for b.Loop() {
		if err := DecodeEnvelope(buf, &got); err != nil {
			b.Fatal(err)
		}
	}
}
