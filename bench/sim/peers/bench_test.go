package peers

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAIBrixPick (see runTable) routes 10,000-token prompts that share a 2,000-token
// prefix among 16 families over 8 workers (the mooncake trace's mean
// prompt is 9,792 tokens).
func BenchmarkAIBrixPick(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]uint32, 64)
	for i := range prompts {
		t := make([]uint32, 10000)
		for j := range t {
			if j < 2000 {
				t[j] = uint32(i%16*100000 + j)
			} else {
				t[j] = rng.Uint32()
			}
		}
		prompts[i] = t
	}
	p := newAIBrix(8, 1, DefaultAIBrixConfig())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := p.Pick(float64(i), &Request{Text: prompts[i%len(prompts)]})
		p.Done(w)
	}
}

// BenchmarkLLMDPick is BenchmarkAIBrixPick's prompts through llm-d's
// default profile (approximate prefix producer, 6,144-block LRUs).
func BenchmarkLLMDPick(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]uint32, 64)
	for i := range prompts {
		t := make([]uint32, 10000)
		for j := range t {
			if j < 2000 {
				t[j] = uint32(i%16*100000 + j)
			} else {
				t[j] = rng.Uint32()
			}
		}
		prompts[i] = t
	}
	_, es := fakes(8)
	p := newLLMD(Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 6144}, DefaultLLMDConfig())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Pick(float64(i), &Request{Text: prompts[i%len(prompts)]})
	}
}
