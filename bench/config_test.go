package bench

import (
	"errors"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	ok.EngineBlocks, ok.Fill, ok.PromptForm = 64, true, PromptTokens
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	ok.Replicas = 2
	ok.StartReplicas = func(int) ([]Replica, func(), error) { return nil, nil, nil }
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	startReplicas := ok.StartReplicas
	for name, mut := range map[string]func(*Config){
		"concurrency":         func(c *Config) { c.Concurrency = 0 },
		"prompt form":         func(c *Config) { c.PromptForm = "token_ids" },
		"empty prompt form":   func(c *Config) { c.PromptForm = "" },
		"engine blocks":       func(c *Config) { c.EngineBlocks = -1 },
		"fill without":        func(c *Config) { c.Fill = true },
		"fill with endpoints": func(c *Config) { c.Fill, c.EngineBlocks, c.KVEventsEndpoints = true, 64, []string{"tcp://127.0.0.1:1"} },
		"trace block size":    func(c *Config) { c.Workload, c.BlockSize = "trace:x", 48 },
		"replicas < 0":        func(c *Config) { c.Replicas = -1 },
		"replicas no hook":    func(c *Config) { c.Replicas = 2 },
		"replicas target":     func(c *Config) { c.Replicas, c.StartReplicas, c.Target = 2, startReplicas, "http://127.0.0.1:1" },
		"probe interval":      func(c *Config) { c.Replicas, c.StartReplicas, c.ProbeInterval = 2, startReplicas, 0 },
		"replicas disagg":     func(c *Config) { c.Replicas, c.StartReplicas, c.Mix = 2, startReplicas, MixDisagg },
		"disagg no workers":   func(c *Config) { c.Mix, c.Workers = MixDisagg, 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
