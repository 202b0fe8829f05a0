package httpapi_test

import (
	"fmt"
	"net/url"
	"testing"
)

// TestReservationIDsInPath: a selection id is any JSON string, and the
// lifecycle routes take it as one percent-encoded path segment, as axum's
// Path extractor decodes it. fasthttp's normalized path has already turned
// %2F into a separator (and dropped dot segments), so the id must come from
// the original path.
func TestReservationIDsInPath(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	for _, id := range []string{"tenant/req-1", "a b", "50%", "é", "..", "a/../b"} {
		body := fmt.Sprintf(`{"selection_id":%q,"model_name":"m","token_ids":[1,2,3,4]}`, id)
		h.want(h.do("POST", "/select_and_reserve", body), 200)
		p := "/reservations/" + url.PathEscape(id)
		h.want(h.do("POST", p+"/output_block", `{}`), 200, `{"status":"ok"}`)
		h.want(h.do("POST", p+"/prefill_complete", ``), 200, `{"status":"ok"}`)
		h.want(h.do("DELETE", p, ""), 200, `{"status":"ok"}`)
		h.want(h.do("DELETE", p, ""), 404)
	}
	if l := h.load("m", 1, 0); num(l["active_requests"]) != 0 || num(l["potential_decode_blocks"]) != 0 {
		t.Fatalf("bookings left: %v", l)
	}
	// A separator that is not escaped still splits the route.
	h.want(h.do("DELETE", "/reservations/x/y", ""), 404, "route not found")
}
