package sched

import (
	"errors"
	"math"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := c.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Params{OverlapScoreCredit: 1, PrefillLoadScale: 1, HostCacheHitWeight: 0.75, DiskCacheHitWeight: 0.25, TrackPrefillTokens: true, AssumeKVReuse: true}
	if p != want {
		t.Fatalf("default params %+v, want %+v", p, want)
	}
	if c.ActiveRequestExpiry.Seconds() != 300 || c.TrackOutputBlocks || !c.TrackActiveBlocks || c.QueueThreshold != nil {
		t.Fatalf("defaults %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Config)
	}{
		{"negative credit", func(c *Config) { c.OverlapScoreCredit = -1 }},
		{"NaN scale", func(c *Config) { c.PrefillLoadScale = math.NaN() }},
		{"infinite decay", func(c *Config) { c.OverlapScoreCreditDecay = math.Inf(1) }},
		{"negative request weight", func(c *Config) { c.DecodeActiveRequestWeight = -0.1 }},
		{"host weight > 1", func(c *Config) { c.HostCacheHitWeight = 1.5 }},
		{"disk weight < 0", func(c *Config) { c.DiskCacheHitWeight = -0.5 }},
		{"shared multiplier > 1", func(c *Config) { c.SharedCacheMultiplier = 2 }},
		{"negative temperature", func(c *Config) { c.RouterTemperature = -1 }},
		{"negative overlap weight", func(c *Config) { c.OverlapScoreWeight = ptr(-1.0) }},
		{"negative decode threshold", func(c *Config) { c.DecodeBusyThreshold = ptr(-1.0) }},
		{"NaN prefill threshold", func(c *Config) { c.PrefillBusyThreshold = ptr(math.NaN()) }},
		{"negative queue threshold", func(c *Config) { c.QueueThreshold = ptr(-2.0) }},
		{"output without active blocks", func(c *Config) { c.TrackOutputBlocks, c.TrackActiveBlocks = true, false }},
		{"zero expiry", func(c *Config) { c.ActiveRequestExpiry = 0 }},
		{"zero check interval", func(c *Config) { c.ExpiryCheckInterval = 0 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestResolveOverrides(t *testing.T) {
	c := DefaultConfig()
	c.OverlapScoreWeight = ptr(2.0) // deprecated: scale = 2
	p, _ := c.Resolve(nil)
	if p.PrefillLoadScale != 2 || p.OverlapScoreCredit != 1 {
		t.Fatalf("weight 2: %+v", p)
	}
	c.OverlapScoreWeight = ptr(0.0) // weight 0 also zeroes the credit
	p, _ = c.Resolve(nil)
	if p.PrefillLoadScale != 0 || p.OverlapScoreCredit != 0 {
		t.Fatalf("weight 0: %+v", p)
	}

	c = DefaultConfig()
	o := &Override{
		OverlapScoreCredit:    ptr(0.5),
		PrefillLoadScale:      ptr(3.0),
		RouterTemperature:     ptr(0.7),
		AssumeKVReuse:         ptr(false),
		TrackPrefillTokens:    ptr(false),
		SharedCacheMultiplier: ptr(0.5),
	}
	p, err := c.Resolve(o)
	if err != nil {
		t.Fatal(err)
	}
	want := Params{OverlapScoreCredit: 0.5, PrefillLoadScale: 3, Temperature: 0.7, SharedCacheMultiplier: 0.5, HostCacheHitWeight: 0.75, DiskCacheHitWeight: 0.25}
	if p != want {
		t.Fatalf("override params %+v, want %+v", p, want)
	}
	// The alias is applied after the explicit keys.
	o.OverlapScoreWeight = ptr(0.0)
	p, _ = c.Resolve(o)
	if p.PrefillLoadScale != 0 || p.OverlapScoreCredit != 0 {
		t.Fatalf("override alias: %+v", p)
	}

	for _, bad := range []*Override{
		{OverlapScoreCredit: ptr(-1.0)},
		{PrefillLoadScale: ptr(math.Inf(1))},
		{OverlapScoreWeight: ptr(-0.5)},
		{RouterTemperature: ptr(math.NaN())},
		{SharedCacheMultiplier: ptr(1.5)},
	} {
		if _, err := c.Resolve(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Resolve(%+v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestBusy(t *testing.T) {
	thr := ptr(0.5)
	for _, tt := range []struct {
		name        string
		got         func() (bool, bool)
		busy, known bool
	}{
		{"decode at threshold is not busy", func() (bool, bool) { return DecodeBusy(50, 100, thr) }, false, true},
		{"decode above threshold", func() (bool, bool) { return DecodeBusy(51, 100, thr) }, true, true},
		{"decode threshold unset", func() (bool, bool) { return DecodeBusy(99, 100, nil) }, false, false},
		{"decode capacity unknown", func() (bool, bool) { return DecodeBusy(99, 0, thr) }, false, false},
		{"prefill at threshold", func() (bool, bool) { return PrefillBusy(4096, 8192, thr) }, false, true},
		{"prefill above threshold", func() (bool, bool) { return PrefillBusy(4097, 8192, thr) }, true, true},
		{"prefill threshold unset", func() (bool, bool) { return PrefillBusy(1e9, 8192, nil) }, false, false},
		{"prefill capacity unknown uses 10M", func() (bool, bool) { return PrefillBusy(5_000_001, 0, thr) }, true, true},
		{"prefill capacity unknown, below", func() (bool, bool) { return PrefillBusy(5_000_000, 0, thr) }, false, true},
	} {
		busy, known := tt.got()
		if busy != tt.busy || known != tt.known {
			t.Errorf("%s: (busy, known) = (%v, %v), want (%v, %v)", tt.name, busy, known, tt.busy, tt.known)
		}
	}
}
