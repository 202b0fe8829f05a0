package httpapi

import (
	"github.com/kvselect/kvselect/core"
)

// appendScores appends the /query and /query_by_hash response
// (ScoreResponse in ai-dynamo/dynamo:lib/kv-router/src/services/indexer/
// server.rs): device tokens per worker and rank, the legacy empty
// frequencies, and per instance the Mooncake tier summary (cumulative gpu
// <= cpu <= disk tokens, per-rank device tokens, their maximum as
// longest_matched). m.Matches are sorted by (worker, rank).
//
//	{"scores":{"7":{"0":32}},"frequencies":[],
//	 "instances":{"7":{"longest_matched":48,"gpu":32,"dp":{"0":32},"cpu":48,"disk":48}}}
func appendScores(dst []byte, m *core.IndexerMatch) []byte {
	bs := uint64(m.BlockSize)
	ms := m.Matches
	dst = append(dst, `{"scores":{`...)
	first := true
	for i := 0; i < len(ms); {
		j := i
		opened := false
		for ; j < len(ms) && ms[j].Worker.WorkerID == ms[i].Worker.WorkerID; j++ {
			if ms[j].Device == 0 {
				continue // lower tiers only: no device score
			}
			if !opened {
				if !first {
					dst = append(dst, ',')
				}
				first, opened = false, true
				dst = append(dst, '"')
				dst = appendUint(dst, ms[i].Worker.WorkerID)
				dst = append(dst, `":{`...)
			} else {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = appendUint(dst, uint64(ms[j].Worker.DPRank))
			dst = append(dst, `":`...)
			dst = appendUint(dst, uint64(ms[j].Device)*bs)
		}
		if opened {
			dst = append(dst, '}')
		}
		i = j
	}
	dst = append(dst, `},"frequencies":[],"instances":{`...)
	for i := 0; i < len(ms); {
		if i > 0 {
			dst = append(dst, ',')
		}
		var gpu, cpu, disk uint64
		j := i
		for ; j < len(ms) && ms[j].Worker.WorkerID == ms[i].Worker.WorkerID; j++ {
			g, c, d := ms[j].Cumulative()
			gpu, cpu, disk = max(gpu, uint64(g)*bs), max(cpu, uint64(c)*bs), max(disk, uint64(d)*bs)
		}
		dst = append(dst, '"')
		dst = appendUint(dst, ms[i].Worker.WorkerID)
		dst = append(dst, `":{"longest_matched":`...)
		dst = appendUint(dst, max(gpu, cpu, disk))
		dst = append(dst, `,"gpu":`...)
		dst = appendUint(dst, gpu)
		dst = append(dst, `,"dp":{`...)
		for k := i; k < j; k++ {
			if k > i {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = appendUint(dst, uint64(ms[k].Worker.DPRank))
			dst = append(dst, `":`...)
			dst = appendUint(dst, uint64(ms[k].Device)*bs)
		}
		dst = append(dst, `},"cpu":`...)
		dst = appendUint(dst, cpu)
		dst = append(dst, `,"disk":`...)
		dst = appendUint(dst, disk)
		dst = append(dst, '}')
		i = j
	}
	return append(dst, "}}"...)
}

// appendTiered appends the /query_tiered_by_hash response (the fork's
// TieredQueryResponse: block_size and WireTieredMatchDetails, whose maps
// are lists of [key, value] pairs): device blocks per rank, then each
// lower tier's extension blocks, in blocks.
//
//	{"block_size":16,"tiered":{"device":{"scores":[[{"worker_id":7,"dp_rank":0},2]],"frequencies":[]},
//	 "lower_tier":[["host_pinned",{"hits":[[{"worker_id":7,"dp_rank":0},1]]}]]}}
func appendTiered(dst []byte, m *core.IndexerMatch) []byte {
	dst = append(dst, `{"block_size":`...)
	dst = appendUint(dst, uint64(m.BlockSize))
	dst = append(dst, `,"tiered":{"device":{"scores":[`...)
	n := 0
	for _, x := range m.Matches {
		if x.Device == 0 {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendRankCount(dst, x.Worker, uint64(x.Device))
	}
	dst = append(dst, `],"frequencies":[]},"lower_tier":[`...)
	tiers := 0
	for t := 1; t < core.NumTiers; t++ {
		hits := 0
		for _, x := range m.Matches {
			if v := tierBlocks(x, t); v > 0 {
				if hits == 0 {
					if tiers > 0 {
						dst = append(dst, ',')
					}
					tiers++
					dst = append(dst, `["`...)
					dst = append(dst, core.TierName(t)...)
					dst = append(dst, `",{"hits":[`...)
				} else {
					dst = append(dst, ',')
				}
				hits++
				dst = appendRankCount(dst, x.Worker, uint64(v))
			}
		}
		if hits > 0 {
			dst = append(dst, "]}]"...)
		}
	}
	return append(dst, "]}}"...)
}

// tierBlocks is x's extension in lower tier t (1 host, 2 disk, 3 external).
func tierBlocks(x core.Match, t int) uint32 {
	switch t {
	case 1:
		return x.Host
	case 2:
		return x.Disk
	case 3:
		return x.External
	}
	return 0
}

func appendRankCount(dst []byte, w core.WorkerKey, v uint64) []byte {
	dst = append(dst, `[{"worker_id":`...)
	dst = appendUint(dst, w.WorkerID)
	dst = append(dst, `,"dp_rank":`...)
	dst = appendUint(dst, uint64(w.DPRank))
	dst = append(dst, "},"...)
	dst = appendUint(dst, v)
	return append(dst, ']')
}

// appendDump appends the /dump object of parts (shared by the selector and
// the indexer): {"<model>:<group>": {"block_size": N, "events": [...],
// "model_name": m, "routing_group": g}}. The last two are kvselect's: the
// reference's readers ignore unknown fields, and with them a model name
// containing ':' is recovered whole.
func appendDump(dst []byte, parts []core.PartitionDump) []byte {
	dst = append(dst, '{')
	for i, d := range parts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, d.Key)
		dst = append(dst, `:{"block_size":`...)
		dst = appendUint(dst, uint64(d.BlockSize))
		dst = append(dst, `,"events":[`...)
		for j := range d.Events {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = core.AppendEventJSON(dst, &d.Events[j])
		}
		dst = append(dst, `],"model_name":`...)
		dst = appendString(dst, d.ModelName)
		dst = append(dst, `,"routing_group":`...)
		dst = appendString(dst, d.RoutingGroup)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
