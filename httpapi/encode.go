package httpapi

import (
	"strconv"
	"unicode/utf8"

	"github.com/kvselect/kvselect/core"
)

// appendSelection appends the SelectResponse JSON of o (field order as the
// reference serialises it). Hashes are signed 64-bit numbers (formatted by
// appendHashI64, itoa.go); rawSeq, when non-nil, is the already-validated
// JSON array to emit as sequence_hashes (see selectReq.echoSeq).
// Allocation-free when dst has room.
func appendSelection(dst []byte, o *core.Selection, rawSeq []byte) []byte {
	dst = append(dst, '{')
	if o.HasSelectionID {
		dst = append(dst, `"selection_id":`...)
		dst = appendString(dst, o.SelectionID)
		dst = append(dst, ',')
	}
	if o.Booked {
		dst = append(dst, `"sequence_hashes":`...)
		if rawSeq != nil {
			dst = append(dst, rawSeq...)
		} else {
			dst = append(dst, '[')
			for i, h := range o.SequenceHashes {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendHashI64(dst, int64(h))
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"isl_tokens":`...)
		dst = strconv.AppendInt(dst, o.ISLTokens, 10)
		dst = append(dst, `,"track_prefill_tokens":`...)
		dst = strconv.AppendBool(dst, o.TrackPrefillTokens)
		dst = append(dst, ',')
	}
	dst = append(dst, `"model_name":`...)
	dst = appendString(dst, o.ModelName)
	dst = append(dst, `,"routing_group":`...)
	dst = appendString(dst, o.RoutingGroup)
	dst = append(dst, `,"worker_id":`...)
	dst = strconv.AppendUint(dst, o.WorkerID, 10)
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(o.DPRank), 10)
	dst = append(dst, `,"endpoint":`...)
	dst = appendString(dst, o.Endpoint)
	dst = append(dst, `,"block_size":`...)
	dst = strconv.AppendUint(dst, uint64(o.BlockSize), 10)
	ov := &o.Overlap
	dst = append(dst, `,"overlap":{"longest_matched":`...)
	dst = strconv.AppendInt(dst, ov.LongestMatched, 10)
	dst = append(dst, `,"gpu":`...)
	dst = strconv.AppendInt(dst, ov.GPU, 10)
	dst = append(dst, `,"dp":{`...)
	for i, d := range ov.DP {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = strconv.AppendUint(dst, uint64(d.DPRank), 10)
		dst = append(dst, `":`...)
		dst = strconv.AppendInt(dst, d.Tokens, 10)
	}
	dst = append(dst, `},"cpu":`...)
	dst = strconv.AppendInt(dst, ov.CPU, 10)
	dst = append(dst, `,"disk":`...)
	dst = strconv.AppendInt(dst, ov.Disk, 10)
	dst = append(dst, `},"effective_prefill_tokens":`...)
	dst = strconv.AppendInt(dst, o.EffectivePrefillTokens, 10)
	dst = append(dst, `,"potential_decode_blocks":`...)
	dst = strconv.AppendInt(dst, o.PotentialDecodeBlocks, 10)
	if o.DecodeBusyKnown {
		dst = append(dst, `,"decode_busy":`...)
		dst = strconv.AppendBool(dst, o.DecodeBusy)
	}
	if o.HasWorkerLoad {
		wl := &o.WorkerLoad
		dst = append(dst, `,"worker_load":{"active_prefill_tokens":`...)
		dst = strconv.AppendInt(dst, wl.ActivePrefillTokens, 10)
		dst = append(dst, `,"prefill_token_capacity":`...)
		dst = strconv.AppendInt(dst, wl.PrefillTokenCapacity, 10)
		if wl.TotalKVBlocks > 0 {
			dst = append(dst, `,"total_kv_blocks":`...)
			dst = strconv.AppendInt(dst, wl.TotalKVBlocks, 10)
		}
		if wl.PrefillBusyKnown {
			dst = append(dst, `,"prefill_busy":`...)
			dst = strconv.AppendBool(dst, wl.PrefillBusy)
		}
		dst = append(dst, '}')
	}
	if o.HasKVHint {
		dst = appendKVHint(dst, o)
	}
	return append(dst, '}')
}

// appendKVHint appends a booking's kv_hint: the reference's versioned
// action envelope (ai-dynamo/dynamo:lib/kv-router/src/kv_hints.rs,
// protocol 0.1, one kv.fetch 1.0 action "a1" whose message_id is the
// selection id), laid out as the standalone-selection document shows it
// (the payload's source_control_endpoint, then block_hashes as u64
// numbers; the reference's serde map would sort the two keys, which no
// JSON reader can tell apart).
func appendKVHint(dst []byte, o *core.Selection) []byte {
	dst = append(dst, `,"kv_hint":{"protocol_version":"0.1","message_id":`...)
	dst = appendString(dst, o.SelectionID)
	dst = append(dst, `,"actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"source_control_endpoint":`...)
	dst = appendString(dst, o.KVHint.SourceControlEndpoint)
	dst = append(dst, `,"block_hashes":[`...)
	for i, h := range o.KVHint.BlockHashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendHashU64(dst, h)
	}
	return append(dst, `]}}]}`...)
}

// appendError appends {"error":msg}.
func appendError(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendString(dst, msg)
	return append(dst, '}')
}

// appendRejection appends a router queue rejection's body: the reference's
// {"error": msg, "details": {policy_class, limit_kind, current, limit}}.
func appendRejection(dst []byte, msg string, r *core.QueueRejection) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"details":{"policy_class":`...)
	dst = appendString(dst, r.Class)
	dst = append(dst, `,"limit_kind":`...)
	dst = appendString(dst, r.Kind.String())
	dst = append(dst, `,"current":`...)
	dst = strconv.AppendInt(dst, r.Current, 10)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, r.Limit, 10)
	return append(dst, `}}`...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (without HTML escaping); invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
