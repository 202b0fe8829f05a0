package epp

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvselect/kvselect/core"
)

// respHeadersServed is the response headers as a gateway sends them after
// a retry: the served endpoint in the metadata context (GIE's
// "Destination Endpoint Served").
func respHeadersServed(served string) *extprocv3.ProcessingRequest {
	m := respHeaders(true, false)
	m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		DefaultMetadataNS: {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(served)}},
	}}
	return m
}

// load is the /loads entry of worker id (rank 0) in the default group.
func load(t *testing.T, svc *core.Service, id uint64) core.PotentialLoad {
	t.Helper()
	for _, pl := range svc.Loads("m", "") {
		for _, l := range pl.Loads {
			if l.WorkerID == id {
				return l
			}
		}
	}
	t.Fatalf("worker %d has no load entry", id)
	return core.PotentialLoad{}
}

// workerOf is the worker id of a test gateway's endpoint 127.0.0.N:8000.
func workerOf(t *testing.T, hp string) uint64 {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscanf(hp, "127.0.0.%d:8000", &n); err != nil {
		t.Fatalf("endpoint %q: %v", hp, err)
	}
	return n
}

const servedBody = `{"model":"m","stream":true,"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]}`

// TestEPPServedElsewhereMovesBooking: when the gateway reports that a
// fallback served the request, the booking moves there: the served
// worker carries it (its prefill tokens, then its prefill completion and
// output), the picked worker carries nothing, and the end of the stream
// frees it, leaving zero. An unknown served endpoint leaves the booking
// where it was (counted); the booked endpoint itself counts nothing.
func TestEPPServedElsewhereMovesBooking(t *testing.T) {
	g := newGateway(t, 3, Config{Fallbacks: 2}, nil)
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(servedBody, true))
	list := strings.Split(picked(t, c.recv()), ",")
	c.echoed()
	if len(list) != 3 {
		t.Fatalf("destination list %v", list)
	}
	booked, fallback := workerOf(t, list[0]), workerOf(t, list[1])
	if l := load(t, g.svc, booked); l.ActiveRequests != 1 || l.PotentialPrefillTokens == 0 {
		t.Fatalf("picked worker before the response: %+v", l)
	}

	// The gateway's first try failed; the second endpoint served.
	c.send(respHeadersServed(list[1]))
	c.recv()
	moved, left := load(t, g.svc, fallback), load(t, g.svc, booked)
	if moved.ActiveRequests != 1 || moved.PotentialPrefillTokens == 0 || left.ActiveRequests != 0 || left.PotentialPrefillTokens != 0 {
		t.Fatalf("after the served report: served worker %+v, picked worker %+v; want the booking on the served one", moved, left)
	}
	if st := g.srv.Stats(); st.ServedElsewhere != 1 || st.ServedMoved != 1 || st.ServedUnknown != 0 || st.ServedUnmoved != 0 || g.svc.Stats().Reservations != 1 {
		t.Fatalf("stats %+v, reservations %d", st, g.svc.Stats().Reservations)
	}
	// The lifecycle follows the moved booking: the first chunk completes
	// its prefill, the end frees it.
	c.send(respBody(sse(1, 0), false))
	c.recv()
	if l := load(t, g.svc, fallback); l.ActiveRequests != 1 || l.PotentialPrefillTokens != 0 {
		t.Fatalf("served worker after its first chunk: %+v; want prefill complete", l)
	}
	c.send(respBody(sse(20, 20), true))
	c.recv()
	if n := g.svc.Stats().Reservations; n != 0 {
		t.Fatalf("%d bookings live after the end", n)
	}
	_ = c.s.CloseSend()
	if n := g.settle(); n != 0 {
		t.Fatalf("%d bookings live after the close", n)
	}
	for w := uint64(1); w <= 3; w++ {
		if l := load(t, g.svc, w); l.ActiveRequests != 0 || l.PotentialPrefillTokens != 0 || l.PotentialDecodeBlocks != 0 {
			t.Fatalf("worker %d after the end: %+v", w, l)
		}
	}
	if st := g.srv.Stats(); st.Freed[FreeComplete] != 1 {
		t.Fatalf("frees %v", st.Freed)
	}

	// An endpoint no worker has: counted, the booking stays.
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(servedBody, true))
	list = strings.Split(picked(t, c.recv()), ",")
	c.echoed()
	c.send(respHeadersServed("10.9.9.9:8000"))
	c.recv()
	if l := load(t, g.svc, workerOf(t, list[0])); l.ActiveRequests != 1 {
		t.Fatalf("picked worker after an unknown served endpoint: %+v", l)
	}
	if st := g.srv.Stats(); st.ServedElsewhere != 2 || st.ServedUnknown != 1 || st.ServedMoved != 1 {
		t.Fatalf("stats %+v", st)
	}
	c.cancel()
	if n := g.settle(); n != 0 {
		t.Fatalf("%d bookings live after the cancel", n)
	}

	// The booked endpoint reported served: nothing moves or counts.
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(servedBody, true))
	list = strings.Split(picked(t, c.recv()), ",")
	c.echoed()
	c.send(respHeadersServed(list[0]))
	c.recv()
	if st := g.srv.Stats(); st.ServedElsewhere != 2 || g.svc.Stats().Reservations != 1 || load(t, g.svc, workerOf(t, list[0])).ActiveRequests != 1 {
		t.Fatalf("the booked endpoint served: stats %+v", st)
	}
	c.cancel()
	if n := g.settle(); n != 0 {
		t.Fatalf("%d bookings live", n)
	}
}

// TestSameHostPort: endpoints compare as addresses.
func TestSameHostPort(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"10.0.0.1:8000", "10.0.0.1:8000", true},
		{"[fd00::1]:8000", "[fd00:0::1]:8000", true},
		{"[::ffff:10.0.0.1]:8000", "10.0.0.1:8000", true},
		{"10.0.0.1:8000", "10.0.0.1:8001", false},
		{"10.0.0.1:8000", "10.0.0.2:8000", false},
		{"pod:8000", "10.0.0.1:8000", false},
	} {
		if got := sameHostPort(tc.a, tc.b); got != tc.want {
			t.Errorf("sameHostPort(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}
