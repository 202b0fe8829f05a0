package core

import (
	"slices"
	"strings"
)

// LoRA narrowing. A request that names a LoRA adapter (lora_name) is
// scheduled among the workers that serve it, as the reference's selection
// core narrows by a host-owned filter
// (ai-dynamo/dynamo:lib/kv-router/src/scheduling/lora_filter.rs,
// narrow_allowed_worker_ids_by_lora):
//
//   - without a LoRA name the allow-set is untouched;
//   - the universe is the request's allowed_worker_ids when given, else
//     every schedulable worker of the partition;
//   - the candidates narrow to the universe's workers the filter names (a
//     filter can only narrow: ids outside the universe are ignored), and a
//     pinned worker inside the universe stays a candidate (the engine
//     loads the adapter lazily; KV reuse wins);
//   - an empty result leaves the allow-set as it was, so the request stays
//     routable (the adapter is loaded wherever it lands).
//
// Narrowing is per worker id, not per rank. The reference's standalone
// service injects no filter, so it never narrows; kvselect narrows only by
// what the workers declare, so a caller that declares no adapters sees the
// reference's decisions unchanged.

// LoraWorkerFilter is the host's source of which workers serve an adapter:
// WorkersForLora appends to dst the ids of available that serve lora and
// returns it. It is called on the selection path, concurrently, and must
// not block.
type LoraWorkerFilter interface {
	WorkersForLora(lora string, available, dst []uint64) []uint64
}

// adapterSet is a sorted, deduplicated list of adapter names.
type adapterSet []string

func (a adapterSet) has(name string) bool {
	_, ok := slices.BinarySearch(a, name)
	return ok
}

// newAdapterSet is the set of the names of lists, nil when empty.
func newAdapterSet(lists ...[]string) adapterSet {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// servesLora reports whether the snapshot's worker at index i serves lora,
// by the built-in sources: the record's lora_adapters and what its engine
// reported (SetEngineAdapters).
func (sn *snapshot) servesLora(i int, lora string) bool {
	return sn.views[i].adapters.has(lora)
}

// narrowLora narrows cons.AllowedWorkerIDs for a request naming lora (see
// above), appending into buf, which it returns for reuse.
func (s *Service) narrowLora(sn *snapshot, lora string, allowed []uint64, hasAllowed bool, pinned *WorkerKey, buf []uint64) (narrowed []uint64, ok bool, _ []uint64) {
	if lora == "" || (!sn.anyAdapters && s.loraFilter == nil) {
		return nil, false, buf
	}
	base := allowed
	buf = buf[:0] // reused per request: nothing of the last one is kept
	if !hasAllowed {
		for i := range sn.workers {
			buf = append(buf, sn.workers[i].ID)
		}
		base = buf
	}
	if len(base) == 0 {
		return nil, false, buf
	}
	start := len(buf)
	if s.loraFilter != nil {
		buf = s.loraFilter.WorkersForLora(lora, base, buf)
		// Keep only ids of the universe, once each.
		kept := buf[start:start]
		for _, id := range buf[start:] {
			if slices.Contains(base, id) && !slices.Contains(kept, id) {
				kept = append(kept, id)
			}
		}
		buf = buf[:start+len(kept)]
	} else {
		for _, id := range base {
			if i := sn.find(id); i >= 0 && sn.servesLora(i, lora) && !slices.Contains(buf[start:], id) {
				buf = append(buf, id)
			}
		}
	}
	if pinned != nil && slices.Contains(base, pinned.WorkerID) && !slices.Contains(buf[start:], pinned.WorkerID) {
		buf = append(buf, pinned.WorkerID)
	}
	if len(buf) == start {
		return nil, false, buf
	}
	return buf[start:], true, buf
}

// allowedFor is the allow-set of a request naming a LoRA adapter on
// snapshot sn: its allowed_worker_ids narrowed to the workers serving the
// adapter (or unchanged, see narrowLora), in sc's buffer.
func (s *Service) allowedFor(sn *snapshot, req *SelectRequest, sc *scratch) []uint64 {
	allowed := req.AllowedWorkerIDs
	if req.HasAllowedWorkerIDs && allowed == nil {
		allowed = []uint64{}
	}
	narrowed, ok, buf := s.narrowLora(sn, req.Prompt.LoraName, allowed, req.HasAllowedWorkerIDs, req.PinnedWorker, sc.lora)
	sc.lora = buf
	if !ok {
		if !req.HasAllowedWorkerIDs {
			return nil
		}
		return allowed
	}
	return narrowed
}

// SetEngineAdapters records the adapters worker id's engine reports
// serving (running or loaded: vLLM's vllm:lora_requests_info, for
// example), the second built-in source of LoRA narrowing beside the
// record's lora_adapters; nil clears it. A host that scrapes the engines
// calls it; an unknown worker is ignored. It reports whether the worker is
// known.
func (s *Service) SetEngineAdapters(id uint64, adapters []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.catalog[id]
	if !ok {
		return false
	}
	set := newAdapterSet(cloneStrings(adapters))
	if slices.Equal(set, e.engineAdapters) {
		return true
	}
	e.engineAdapters = set
	if e.part.attached(id) {
		s.publishLocked(e.part)
	}
	return true
}

func cloneStrings(in []string) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = strings.Clone(v)
	}
	return out
}

// SetEngineAvailable records whether worker id's engine answers the
// host's scrape of its metrics. A worker whose engine is down (up false)
// stays in the catalog and its partition (its bookings, loads and KV
// listeners are kept, /loads shows its booked load) but is out of
// selection until it answers again: the eligibility seam beside
// SetEngineAdapters. An unknown worker is ignored; it reports whether the
// worker is known. A record replaced by an upsert keeps the state.
func (s *Service) SetEngineAvailable(id uint64, up bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.catalog[id]
	if !ok {
		return false
	}
	if e.engineDown == !up {
		return true
	}
	e.engineDown = !up
	if e.part.attached(id) {
		s.publishLocked(e.part)
	}
	return true
}
