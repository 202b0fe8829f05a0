package httpapi_test

import (
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// TestOutputBlockWithDefaultConfig: POST /reservations/{id}/output_block
// adds one decode block with the reference's default configuration
// (router_track_output_blocks false), as the reference's selection service
// does (its test output_block_endpoint_updates_reserved_load).
func TestOutputBlockWithDefaultConfig(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { c.Sched.TrackOutputBlocks = false })
	h.worker(1, "")
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"r","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	before := num(h.load("m", 1, 0)["potential_decode_blocks"])
	h.want(h.do("POST", "/reservations/r/output_block", `{}`), 200, `{"status":"ok"}`)
	if after := num(h.load("m", 1, 0)["potential_decode_blocks"]); after != before+1 {
		t.Fatalf("potential_decode_blocks %d -> %d, want +1", before, after)
	}
}

// TestReservationLimitIs503: a booking past the live-reservation limit is a
// 503 whose JSON error names the limit; the reservation already booked
// keeps working, and after it is freed the booking succeeds.
func TestReservationLimitIs503(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { c.MaxReservations = 1 })
	h.worker(1, "")
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"a","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"b","model_name":"m","token_ids":[1,2,3,4]}`), 503, `{"error":"live reservation limit reached (1)`)
	h.want(h.do("POST", "/reservations", `{"selection_id":"b","model_name":"m","worker_id":1,"sequence_hashes":[1],"isl_tokens":4}`), 503, "live reservation limit reached")
	h.want(h.do("POST", "/reservations/a/prefill_complete", ``), 200)
	h.want(h.do("DELETE", "/reservations/a", ""), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"b","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.want(h.do("GET", "/metrics", ""), 200, `kvselect_bookings_total{outcome="refused"} 2`, `kvselect_active_reservations_limit 1`)
}
