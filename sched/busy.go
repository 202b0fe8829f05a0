package sched

// DecodeBusy is a select response's decode_busy:
// potentialDecodeBlocks > threshold × totalKVBlocks, strictly. known is false
// (the field is omitted) when the threshold is unset or the worker's
// totalKVBlocks is unknown (<= 0).
func DecodeBusy(potentialDecodeBlocks, totalKVBlocks int64, threshold *float64) (busy, known bool) {
	if threshold == nil || totalKVBlocks <= 0 {
		return false, false
	}
	return float64(potentialDecodeBlocks) > *threshold*float64(totalKVBlocks), true
}

// PrefillBusy is an advisory select's prefill_busy: activePrefillTokens >
// threshold × capacity, strictly. An unknown capacity (<= 0) uses
// DefaultMaxBatchedTokens, so only an unset threshold makes the answer
// unknown (the reference's standalone service documents prefill_busy as
// omitted only when conditional_disagg_prefill_busy_threshold is unset).
func PrefillBusy(activePrefillTokens, capacity int64, threshold *float64) (busy, known bool) {
	if threshold == nil {
		return false, false
	}
	return float64(activePrefillTokens) > *threshold*float64(PrefillCapacity(capacity)), true
}

// PrefillCapacity returns capacity, or DefaultMaxBatchedTokens when the
// worker did not report max_num_batched_tokens (<= 0). It is the
// prefill_token_capacity an advisory response reports.
func PrefillCapacity(capacity int64) int64 {
	if capacity <= 0 {
		return DefaultMaxBatchedTokens
	}
	return capacity
}
