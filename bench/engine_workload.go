package bench

import (
	"fmt"
	"math/rand/v2"
)

// WorkloadConfig configures a synthetic prefix-sharing workload: every
// prompt is one of Groups shared prefixes of PrefixBlocks blocks followed
// by SuffixBlocks blocks of tokens unique to the prompt.
type WorkloadConfig struct {
	Groups       int
	PrefixBlocks int
	SuffixBlocks int
	BlockSize    int
	Seed         uint64 // the generator's seed, for reproducible runs
}

// Validate reports a config that cannot work.
func (c WorkloadConfig) Validate() error {
	if c.Groups <= 0 || c.PrefixBlocks < 0 || c.SuffixBlocks < 0 || c.PrefixBlocks+c.SuffixBlocks == 0 || c.BlockSize <= 0 {
		return fmt.Errorf("bench: invalid workload %+v", c)
	}
	return nil
}

// Workload generates prompts. It is not safe for concurrent use.
type Workload struct {
	cfg  WorkloadConfig
	rng  *rand.Rand
	next uint32 // the next unique token id of a suffix
}

// NewWorkload returns a generator.
func NewWorkload(cfg WorkloadConfig) (*Workload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Workload{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6b7673656c656374)), next: 1 << 30}, nil
}

// Next returns a new prompt (token ids) and its group.
func (w *Workload) Next() ([]uint32, int) {
	g := w.rng.IntN(w.cfg.Groups)
	bs := w.cfg.BlockSize
	toks := make([]uint32, 0, (w.cfg.PrefixBlocks+w.cfg.SuffixBlocks)*bs)
	for i := range w.cfg.PrefixBlocks * bs {
		toks = append(toks, uint32(g*w.cfg.PrefixBlocks*bs+i))
	}
	for range w.cfg.SuffixBlocks * bs {
		toks = append(toks, w.next)
		w.next++
	}
	return toks, g
}
