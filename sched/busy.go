package sched

// DecodeBusy is decode_busy (spec 6.1; service-api SelectResponse):
// potentialDecodeBlocks > threshold × totalKVBlocks, strictly. known is false
// (the field is omitted) when the threshold is unset or the worker's
// totalKVBlocks is unknown (<= 0).
func DecodeBusy(potentialDecodeBlocks, totalKVBlocks int64, threshold *float64) (busy, known bool) {
	if threshold == nil || totalKVBlocks <= 0 {
		return false, false
	}
	return float64(potentialDecodeBlocks) > *threshold*float64(totalKVBlocks), true
}

// PrefillBusy is the advisory prefill_busy (spec 6.1; seed
// standalone-selection-service): activePrefillTokens > threshold × capacity,
// strictly. An unknown capacity (<= 0) uses DefaultMaxBatchedTokens, so only
// an unset threshold makes the answer unknown (the seed wins over the spec's
// "unknown when capacity is unknown", which it states for decode only).
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

// PrefillBusyThresholdOrQueue returns conditional_disagg_prefill_busy_threshold,
// falling back to router_queue_threshold: the threshold of the conditional
// disagg prefill_load policy (spec 6.1); nil when both are unset. The select
// response's prefill_busy does not fall back: it passes
// Config.PrefillBusyThreshold alone (seed standalone-selection-service and
// service-api: "omitted when conditional_disagg_prefill_busy_threshold is
// unset").
func (c *Config) PrefillBusyThresholdOrQueue() *float64 {
	if c.PrefillBusyThreshold != nil {
		return c.PrefillBusyThreshold
	}
	return c.QueueThreshold
}
