package zmqin

import (
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// BenchmarkDecode decodes one typical vLLM batch (16 BlockStored events of
// 4 blocks x 16 tokens plus one BlockRemoved) per iteration on a warm
// decoder, local hashing included. Target: >= 1e6 events/s per core.
func BenchmarkDecode(b *testing.B) {
	for _, tc := range []struct {
		name string
		enc  Encoder
	}{
		{"array", Encoder{Encoding: EncodingArray}},
		{"map", Encoder{Encoding: EncodingMap}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			wb := typicalBatch(16)
			p := tc.enc.AppendBatch(nil, wb)
			d := NewDecoder(16)
			w := radix.WorkerKey{WorkerID: 1}
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := d.Decode(p, w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(wb.Events))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEncode appends the same typical batch (the simulated engine's
// publishing cost).
func BenchmarkEncode(b *testing.B) {
	wb := typicalBatch(16)
	enc := Encoder{Encoding: EncodingMap}
	buf := enc.AppendBatch(nil, wb)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = enc.AppendBatch(buf[:0], wb)
	}
	b.ReportMetric(float64(b.N*len(wb.Events))/b.Elapsed().Seconds(), "events/s")
}
