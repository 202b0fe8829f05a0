package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// indexFlags are the settings that choose the index shape (core/index.go):
// KV events or approximate, the approximate TTL and cache policy, the
// predicted-TTL side index. The selection service reads them from the
// environment only (ai-dynamo/dynamo:lib/kv-router/src/config.rs,
// kv_router_config_from_lookup); the flags are the frontend's names
// (components/src/dynamo/common/configuration/groups/kv_router_args.py)
// and win over the environment.
type indexFlags struct {
	kvEvents, noKVEvents *bool
	ttl, predictedTTL    *float64
	policy               *string
	// from the environment, before the flags
	envTTL, envPredicted *float64
	envPolicy            string
}

func addIndexFlags(fs *flag.FlagSet) *indexFlags {
	return &indexFlags{
		kvEvents:     fs.Bool("router-kv-events", true, "use the workers' KV events (overrides DYN_ROUTER_USE_KV_EVENTS / DYN_USE_KV_EVENTS)"),
		noKVEvents:   fs.Bool("no-router-kv-events", false, "approximate mode: no KV events; bookings predict what each worker caches, for --router-ttl-secs"),
		ttl:          fs.Float64("router-ttl-secs", 120, "approximate mode: seconds a booked prefix stays predicted after its last booking (DYN_ROUTER_TTL_SECS)"),
		predictedTTL: fs.Float64("router-predicted-ttl-secs", 0, "with KV events: also record bookings in a side index with this TTL, merged by per-worker max (DYN_ROUTER_PREDICTED_TTL_SECS); 0 = off"),
		policy:       fs.String("router-approximate-cache-policy", "ttl", "approximate retention: ttl, or lru (not built: rejected with KV events, TTL with a warning without) (DYN_ROUTER_APPROXIMATE_CACHE_POLICY)"),
	}
}

// readIndexEnv reads the index environment into o (use_kv_events: the
// canonical name first, then the Rust-only alias, as the reference).
func readIndexEnv(o *serveOptions, env func(string) (string, bool)) error {
	for _, name := range []string{"DYN_ROUTER_USE_KV_EVENTS", "DYN_USE_KV_EVENTS"} {
		if s, ok := env(name); ok {
			b, err := parseBool(s)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			o.core.UseKVEvents = b
			break
		}
	}
	for _, v := range []struct {
		name string
		dst  **float64
	}{{"DYN_ROUTER_TTL_SECS", &o.index.envTTL}, {"DYN_ROUTER_PREDICTED_TTL_SECS", &o.index.envPredicted}} {
		if s, ok := env(v.name); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", v.name, s)
			}
			*v.dst = &x
		}
	}
	if s, ok := env("DYN_ROUTER_APPROXIMATE_CACHE_POLICY"); ok {
		o.index.envPolicy = strings.TrimSpace(s)
	}
	return nil
}

// resolve applies the flags over the environment to o.core and reports
// what the host must log (warnings). set holds the flags given.
func (f *indexFlags) resolve(o *serveOptions, set map[string]bool) (warnings []string, err error) {
	if set["router-kv-events"] && set["no-router-kv-events"] {
		return nil, errors.New("--router-kv-events and --no-router-kv-events are mutually exclusive")
	}
	if set["router-kv-events"] {
		o.core.UseKVEvents = *f.kvEvents
	}
	if set["no-router-kv-events"] {
		o.core.UseKVEvents = !*f.noKVEvents
	}
	ttl := f.envTTL
	if set["router-ttl-secs"] {
		ttl = f.ttl
	}
	if ttl != nil {
		d, err := seconds("router_ttl_secs", *ttl, true)
		if err != nil {
			return nil, err
		}
		o.core.ApproxTTL = d
	}
	pred := f.envPredicted
	if set["router-predicted-ttl-secs"] {
		pred = f.predictedTTL
		if *pred == 0 {
			pred = nil // the flag's "off"
		}
	}
	if pred != nil {
		d, err := seconds("router_predicted_ttl_secs", *pred, false)
		if err != nil {
			return nil, err
		}
		o.core.PredictedTTL = d
	}
	policy := f.envPolicy
	if set["router-approximate-cache-policy"] {
		policy = *f.policy
	}
	switch policy {
	case "", "ttl":
	case "lru":
		// ai-dynamo/dynamo:lib/kv-router/src/services/indexer/backend.rs,
		// IndexerPolicy::from_router_config.
		if o.core.UseKVEvents {
			return nil, errors.New("router_approximate_cache_policy=lru requires use_kv_events=false; the local side indexer is TTL-only")
		}
		warnings = append(warnings, "router_approximate_cache_policy=lru is not supported by the selection service yet; falling back to TTL retention")
	default:
		return nil, fmt.Errorf("unknown approximate cache policy %q, expected 'ttl' or 'lru'", policy)
	}
	if o.core.PredictedTTL > 0 && !o.core.UseKVEvents {
		return nil, errors.New("router_predicted_ttl_secs requires use_kv_events=true; do not combine a primary approximate indexer with a side approximate indexer")
	}
	return warnings, nil
}

// seconds converts a TTL in seconds; zeroOK allows 0.
func seconds(name string, s float64, zeroOK bool) (time.Duration, error) {
	if math.IsNaN(s) || s < 0 || (!zeroOK && s == 0) || s > 1e9 {
		return 0, fmt.Errorf("%s must be %s, got %v", name, map[bool]string{true: ">= 0", false: "> 0"}[zeroOK], s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// resolveTracking sets o.core.Tracking from --router-tracking-hash,
// --router-tracking-key-file and --router-tracking-key-id over
// DYN_ROUTER_TRACKING_HASH, _KEY_FILE and _KEY_ID, reading the key file
// (ai-dynamo/dynamo:lib/kv-router/src/tracking_hash.rs,
// TrackingHashContext::from_config). Errors never name the key file's
// path or content.
func resolveTracking(o *serveOptions, env func(string) (string, bool), set map[string]bool, algo, keyFile, keyID string) error {
	pick := func(flagName, envName, flagValue string) (string, bool) {
		if set[flagName] {
			return flagValue, true
		}
		return env(envName)
	}
	if v, ok := pick("router-tracking-hash", "DYN_ROUTER_TRACKING_HASH", algo); ok {
		switch v {
		case "public-xxh3-v1":
			o.core.Tracking.Keyed = false
		case "keyed-xxh3-v1":
			o.core.Tracking.Keyed = true
		default:
			return fmt.Errorf("--router-tracking-hash: router_tracking_hash must be public-xxh3-v1 or keyed-xxh3-v1, got %q", v)
		}
	}
	if v, ok := pick("router-tracking-key-id", "DYN_ROUTER_TRACKING_KEY_ID", keyID); ok {
		o.core.Tracking.KeyID = v
	}
	path, hasFile := pick("router-tracking-key-file", "DYN_ROUTER_TRACKING_KEY_FILE", keyFile)
	if hasFile && o.core.Tracking.Keyed {
		key, err := os.ReadFile(path)
		if err != nil {
			return errors.New("failed to read router tracking key file")
		}
		o.core.Tracking.Key = key
	} else if hasFile {
		o.core.Tracking.Key = []byte{} // present: rejected by Validate
	}
	return o.core.Tracking.Validate()
}
