package core

import (
	"time"

	"github.com/kvselect/kvselect/radix"
)

// PrimaryIndex is a partition's primary KV index as the selection path
// reads it: the tiered prefix match of a request's local block hashes.
// Each partition's local radix index satisfies it (localIndex); a host
// that uses a standalone indexer instead passes one in Options.Primary
// (httpapi's client of POST /query_tiered_by_hash), and the service then
// listens to no KV events and keeps no primary blocks of its own.
type PrimaryIndex interface {
	// MatchPrefix fills r (reset first) with every worker rank holding a
	// prefix of q in partition (model, group), as radix.Index.Match does.
	// An error means the index could not answer; the selection fails as
	// not ready ("Indexer is offline"). It must not retain q or r.
	MatchPrefix(model, group string, q []uint64, r *radix.Result) error
}

// localIndex is the PrimaryIndex of a partition's own radix index.
type localIndex struct{ ix *radix.Index }

func (l localIndex) MatchPrefix(_, _ string, q []uint64, r *radix.Result) error {
	l.ix.Match(q, r)
	return nil
}

// errIndexOffline is the reference's KvRouterError::IndexerOffline
// (ai-dynamo/dynamo:lib/kv-router/src/indexer/types.rs), which its
// selection service answers as not ready.
var errIndexOffline = &Error{Class: ErrNotReady, Msg: "Indexer is offline"}

// The index shapes a partition can have, resolved from Config and Options
// as Dynamo's selection service resolves them from the router config
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/backend.rs,
// IndexerPolicy::from_router_config):
//
//	UseKVEvents, no PredictedTTL: event-driven primary; decisions not recorded
//	UseKVEvents, PredictedTTL:    event-driven primary and a side index that
//	                              booked decisions populate; device depths
//	                              are the per-rank max of the two
//	!UseKVEvents:                 approximate primary (ApproxTTL) that
//	                              booked decisions populate
//	Options.Primary set:          remote primary (+ the side index with
//	                              PredictedTTL); requires UseKVEvents
//
// A decision is recorded only when a booking lands (select_and_reserve,
// or a select replayed or made explicit by POST /reservations), never for
// a query-only select, and never for a hash-only reservation (no token_ids
// and no block_hashes: nothing an index can key on).

// newIndexes builds partition p's indexes.
func (s *Service) newIndexes(p *partition) {
	acfg := radix.ApproxConfig{TTL: s.cfg.ApproxTTL, MaxBlocks: s.cfg.ApproxMaxBlocks, Shards: s.cfg.IndexShards}
	if !s.cfg.UseKVEvents {
		a, err := radix.NewApprox(acfg)
		if err != nil {
			panic("BUG: approximate index config validated by Config.Validate: " + err.Error())
		}
		p.approx, p.index = a, a.Index()
	} else {
		ix, err := radix.New(radix.Config{Shards: s.cfg.IndexShards, MaxBlocksPerRank: s.cfg.IndexMaxBlocksPerRank})
		if err != nil {
			panic("BUG: radix config validated by Config.Validate: " + err.Error())
		}
		p.index = ix
	}
	if s.cfg.PredictedTTL > 0 {
		acfg.TTL = s.cfg.PredictedTTL
		a, err := radix.NewApprox(acfg)
		if err != nil {
			panic("BUG: side index config validated by Config.Validate: " + err.Error())
		}
		p.side = a
	}
	p.primary = s.remote
	if p.primary == nil {
		p.primary = localIndex{p.index}
	}
}

// match fills sc.res with the tiered matches of local in p: the primary's,
// with the side index's device depths merged by per-rank max (side-only
// ranks get a device depth and no lower-tier extension: lower tiers are
// seeded from confirmed primary matches only, as in Dynamo's
// services/indexer/lookup.rs).
func (s *Service) match(p *partition, local []uint64, sc *scratch) error {
	if err := p.primary.MatchPrefix(p.model, p.group, local, &sc.res); err != nil {
		sc.res.Reset()
		return errIndexOffline
	}
	if p.side == nil {
		return nil
	}
	p.side.Match(local, &sc.side)
	for _, m := range sc.side.Matches {
		found := false
		for i := range sc.res.Matches {
			if pm := &sc.res.Matches[i]; pm.Worker == m.Worker {
				pm.Device = max(pm.Device, m.Device)
				found = true
				break
			}
		}
		if !found {
			sc.res.Matches = append(sc.res.Matches, radix.Match{Worker: m.Worker, Device: m.Device})
		}
	}
	return nil
}

// records reports whether bookings in p record their prompt.
func (p *partition) records() bool { return p.approx != nil || p.side != nil }

// record records a landed booking of the prompt whose local hashes are
// local on worker rank w. No-op when p records nothing or local is empty.
func (p *partition) record(w radix.WorkerKey, local []uint64, now time.Time) {
	if len(local) == 0 {
		return
	}
	if p.approx != nil {
		p.approx.Record(w, local, now)
	}
	if p.side != nil {
		p.side.Record(w, local, now)
	}
}

// removeWorker drops every block of a worker from p's local indexes.
func (p *partition) removeWorker(id uint64) {
	if p.approx != nil {
		p.approx.RemoveWorker(id)
	} else {
		p.index.RemoveWorker(id)
	}
	if p.side != nil {
		p.side.RemoveWorker(id)
	}
}

// ExpiresIndex reports whether the service has an index whose blocks
// expire (approximate primary or side index): the host then calls
// ExpireIndex about every ApproxExpiryInterval.
func (s *Service) ExpiresIndex() bool { return !s.cfg.UseKVEvents || s.cfg.PredictedTTL > 0 }

// ApproxExpiryInterval is how often the host should call ExpireIndex: the
// expiry bucket, so a block outlives its TTL by at most two buckets.
const ApproxExpiryInterval = radix.ApproxBucket

// ExpireIndex removes the approximate blocks due at now from every
// partition and returns how many it removed. Bookings also expire what is
// due in the partition they record into.
func (s *Service) ExpireIndex(now time.Time) int {
	n := 0
	for _, p := range *s.parts.Load() {
		if p.approx != nil {
			n += p.approx.Expire(now)
		}
		if p.side != nil {
			n += p.side.Expire(now)
		}
	}
	return n
}
