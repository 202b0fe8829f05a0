package core

import (
	"cmp"

	"github.com/kvselect/kvselect/radix"
)

// StateAgentV2 is the kv_event_source_mode of a worker whose KV events
// come from a state agent: it can receive kv hints but is never a source.
const StateAgentV2 = "state_agent_v2"

// attachHint adds a kv_hint to a booking response when another worker rank
// of the target's router_hint_worker_type holds a strictly longer
// root-aligned prefix than the target and advertises a source control
// endpoint for its rank (ai-dynamo/dynamo:lib/kv-router/src/kv_hints.rs,
// best_hint_source, and services/selection/core/hint.rs):
//
//   - the target must have a non-empty worker type;
//   - a source is another (worker, rank) of the partition with the same
//     worker type, a non-empty endpoint for that rank, and a
//     kv_event_source_mode other than state_agent_v2;
//   - the longest device prefix wins; ties go to the smaller (worker,
//     rank). The reference ranks worker sources before cache owners
//     (external residency owners); kvselect's index has no cache owners,
//     so every source is a worker;
//   - the payload's block_hashes are the source's external hashes of the
//     first n request blocks (entry i is request block i), n its prefix.
//
// Prefixes are device-tier depths, the chain the index retains with the
// owners' external hashes (radix.Tree.PrefixHashes). The caller checked
// that the partition is hint-capable and retains the chain.
func (s *Service) attachHint(p *partition, sn *snapshot, ms []radix.Match, local []uint64, target WorkerKey, targetDevice int64, out *Selection) {
	ti := sn.find(target.WorkerID)
	if ti < 0 || sn.views[ti].hintType == "" {
		return
	}
	typ := sn.views[ti].hintType
	var best radix.Match
	bestEP := ""
	for i := range ms {
		m := &ms[i]
		if int64(m.Device) <= targetDevice || m.Worker == target {
			continue
		}
		wi := sn.find(m.Worker.WorkerID)
		if wi < 0 {
			continue
		}
		v := &sn.views[wi]
		if v.hintType != typ || v.stateAgent {
			continue
		}
		ep := v.hintEndpoints[m.Worker.DPRank]
		if ep == "" {
			continue
		}
		if bestEP == "" || m.Device > best.Device || (m.Device == best.Device && cmpWorker(m.Worker, best.Worker) < 0) {
			best, bestEP = *m, ep
		}
	}
	if bestEP == "" {
		return
	}
	out.KVHint.BlockHashes = p.index.PrefixHashes(out.KVHint.BlockHashes[:0], best.Worker, local, int(best.Device))
	if len(out.KVHint.BlockHashes) == 0 {
		return // the source evicted the chain meanwhile
	}
	out.KVHint.SourceControlEndpoint = bestEP
	out.HasKVHint = true
	s.stats.hints.Add(1)
}

func cmpWorker(a, b WorkerKey) int {
	return cmp.Or(cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
}

// retainsChain reports whether p's index can give a hint source's chain:
// a local, event-driven primary with no approximate side index (the
// reference's supports_kv_transfer_chain_retention).
func (p *partition) retainsChain() bool {
	_, local := p.primary.(localIndex)
	return local && p.approx == nil && p.side == nil
}

// hintsNeedIndex warns once that kv hints need a local event-driven index:
// workers advertise hint capability but this partition's index is
// approximate, remote or has a predicted side index, so no hint is
// attached.
func (s *Service) hintsNeedIndex() {
	s.stats.hintsNoIndex.Add(1)
	s.hintWarned.Do(func() {
		s.logf("router hints need a local event-driven indexer with no approximate side indexer; workers advertise hint capability but no hints will be attached")
	})
}
