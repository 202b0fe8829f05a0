package radix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrBadEvent marks a /dump RouterEvent that cannot be decoded.
var ErrBadEvent = errors.New("radix: bad router event")

// AppendEventJSON appends ev as one RouterEvent of the /dump JSON format
// (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs; field order as Dynamo
// serialises it):
//
//	{"worker_id":7,"storage_tier":"device","residency_domain":"worker",
//	 "event":{"event_id":0,"data":{"stored":{"parent_hash":null,"start_position":null,
//	 "blocks":[{"block_hash":11,"tokens_hash":14643705804678351452,"mm_extra_info":null}]}},
//	 "dp_rank":0}}
//
// Hashes are unsigned 64-bit JSON numbers.
func AppendEventJSON(dst []byte, ev *Event) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = strconv.AppendUint(dst, ev.Worker.WorkerID, 10)
	dst = append(dst, `,"storage_tier":"`...)
	dst = append(dst, ev.Tier.String()...)
	dst = append(dst, `","residency_domain":"worker","event":{"event_id":`...)
	dst = strconv.AppendUint(dst, ev.EventID, 10)
	dst = append(dst, `,"data":`...)
	switch ev.Kind {
	case Stored:
		dst = append(dst, `{"stored":{"parent_hash":`...)
		if ev.HasParent {
			dst = strconv.AppendUint(dst, ev.ParentHash, 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"start_position":`...)
		if ev.HasStartPosition {
			dst = strconv.AppendUint(dst, uint64(ev.StartPosition), 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"blocks":[`...)
		for i, b := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"block_hash":`...)
			dst = strconv.AppendUint(dst, b.Hash, 10)
			dst = append(dst, `,"tokens_hash":`...)
			dst = strconv.AppendUint(dst, b.Local, 10)
			dst = append(dst, `,"mm_extra_info":null}`...)
		}
		dst = append(dst, "]}}"...)
	case Removed:
		dst = append(dst, `{"removed":{"block_hashes":[`...)
		for i, h := range ev.Hashes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, h, 10)
		}
		dst = append(dst, "]}}"...)
	default:
		dst = append(dst, `"cleared"`...)
	}
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Worker.DPRank), 10)
	return append(dst, "}}"...)
}

// routerEventJSON mirrors Dynamo's RouterEvent for decoding.
type routerEventJSON struct {
	WorkerID        uint64          `json:"worker_id"`
	StorageTier     string          `json:"storage_tier"`
	ResidencyDomain json.RawMessage `json:"residency_domain"`
	Event           struct {
		EventID uint64          `json:"event_id"`
		Data    json.RawMessage `json:"data"`
		DPRank  uint32          `json:"dp_rank"`
	} `json:"event"`
}

type storedJSON struct {
	ParentHash    *uint64 `json:"parent_hash"`
	StartPosition *uint32 `json:"start_position"`
	Blocks        []struct {
		BlockHash  uint64 `json:"block_hash"`
		TokensHash uint64 `json:"tokens_hash"`
	} `json:"blocks"`
}

// ParseEventJSON decodes one RouterEvent of the /dump format. A missing
// storage_tier is the device tier; residency_domain may be omitted (legacy)
// or "worker"; an explicit null, "cache_owner" (not supported here) or any
// other value is rejected, as Dynamo skips such events.
func ParseEventJSON(data []byte) (Event, error) {
	var re routerEventJSON
	if err := json.Unmarshal(data, &re); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	tier, ok := ParseTier(re.StorageTier)
	if !ok {
		return Event{}, fmt.Errorf("%w: unknown storage_tier %q", ErrBadEvent, re.StorageTier)
	}
	if re.ResidencyDomain != nil && !bytes.Equal(re.ResidencyDomain, []byte(`"worker"`)) {
		return Event{}, fmt.Errorf("%w: unsupported residency_domain %s", ErrBadEvent, re.ResidencyDomain)
	}
	ev := Event{
		Worker:  WorkerKey{WorkerID: re.WorkerID, DPRank: re.Event.DPRank},
		Tier:    tier,
		EventID: re.Event.EventID,
	}
	d := bytes.TrimSpace(re.Event.Data)
	if bytes.Equal(d, []byte(`"cleared"`)) {
		ev.Kind = Cleared
		return ev, nil
	}
	var data2 struct {
		Stored  *storedJSON `json:"stored"`
		Removed *struct {
			BlockHashes []uint64 `json:"block_hashes"`
		} `json:"removed"`
	}
	if err := json.Unmarshal(d, &data2); err != nil {
		return Event{}, fmt.Errorf("%w: data: %v", ErrBadEvent, err)
	}
	switch {
	case data2.Stored != nil && data2.Removed == nil:
		s := data2.Stored
		ev.Kind = Stored
		if s.ParentHash != nil {
			ev.HasParent, ev.ParentHash = true, *s.ParentHash
		}
		if s.StartPosition != nil {
			ev.HasStartPosition, ev.StartPosition = true, *s.StartPosition
		}
		ev.Blocks = make([]Block, len(s.Blocks))
		for i, b := range s.Blocks {
			ev.Blocks[i] = Block{Hash: b.BlockHash, Local: b.TokensHash}
		}
	case data2.Removed != nil && data2.Stored == nil:
		ev.Kind = Removed
		ev.Hashes = data2.Removed.BlockHashes
	default:
		return Event{}, fmt.Errorf("%w: data must be one of stored, removed, \"cleared\"", ErrBadEvent)
	}
	return ev, nil
}
