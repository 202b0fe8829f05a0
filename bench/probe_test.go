package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowPair is two replicas behind one HTTP server whose every call takes
// delay: a booking or free on either stamps the caller's sent watch, then
// the other's applied watch after lag.
type slowPair struct {
	delay, lag  time.Duration
	fakes       [2]*fakeReplica
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func (s *slowPair) handler(i int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
		}
		var id string
		kind := ChangeBooked
		if r.Method == http.MethodDelete {
			id, kind = strings.TrimPrefix(r.URL.Path, "/reservations/"), ChangeFreed
		} else {
			var body struct {
				ID string `json:"selection_id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			id = body.ID
		}
		self, peer := s.fakes[i], s.fakes[1-i]
		self.sent.Applied(id, kind, time.Now())
		time.AfterFunc(s.lag, func() { peer.apply(id, kind) })
		time.Sleep(s.delay)
		_, _ = w.Write([]byte(`{"worker_id":1}`))
	})
}

// TestProberLanes: with every call slower than the probe interval, several
// probes are in flight at once (more samples than one probe at a time
// could take), never more than probeLanes and at most one per tick; each
// lag is from the booking
// replica's publish to the peer's apply, not from the response.
func TestProberLanes(t *testing.T) {
	s := &slowPair{delay: 20 * time.Millisecond, lag: 2 * time.Millisecond}
	var reps []Replica
	for i := range s.fakes {
		s.fakes[i] = &fakeReplica{}
		s.fakes[i].mu.mirrors = map[string]bool{}
		srv := httptest.NewServer(s.handler(i))
		t.Cleanup(srv.Close)
		reps = append(reps, Replica{URL: srv.URL, Probe: s.fakes[i]})
	}
	cfg := DefaultConfig()
	cfg.ProbeInterval = time.Millisecond
	pr, err := newProber(reps, []Prompt{{Body: []byte(`{"token_ids":[1]}`)}}, "lanes", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.close()
	window := 300 * time.Millisecond
	var wg sync.WaitGroup
	wg.Go(func() { pr.start(context.Background(), window); pr.join() })
	wg.Wait()
	o := pr.result()
	t.Logf("%+v, at most %d calls in flight", *o, s.maxInFlight.Load())
	// One probe at a time makes at most one lifecycle (two calls of 20 ms
	// or more) per 40 ms: 8 in the window.
	if single := int64(window/(2*s.delay)) + 1; o.Probes <= single {
		t.Errorf("%d probes in %v, want more than one probe at a time makes (%d)", o.Probes, window, single)
	}
	if m := s.maxInFlight.Load(); m < 2 || m > probeLanes {
		t.Errorf("%d calls in flight at most, want 2 to %d", m, probeLanes)
	}
	if ticks := int64(window/cfg.ProbeInterval) + 1; o.Probes > ticks {
		t.Errorf("%d probes in %d ticks", o.Probes, ticks)
	}
	// The lag is publish to apply (2 ms here); from the response it would
	// be 0 (the apply lands before the 20 ms response).
	if o.NotVisible != 0 || o.NotFreed != 0 || o.NotSent != 0 || o.BookedP50ms < 1.5 || o.BookedP50ms > 15 || o.AppliedBeforeResponse == 0 {
		t.Errorf("propagation %+v", *o)
	}
}

// TestApplyStamps: a watch fires once, for its own id and kind only;
// disarming removes it, and Armed says whether any is left.
func TestApplyStamps(t *testing.T) {
	var s ApplyStamps
	if s.Armed() {
		t.Fatal("the zero value is armed")
	}
	s.Applied("x", ChangeBooked, time.Now()) // nothing armed: a no-op
	ch, disarm := s.Arm("a", ChangeBooked)
	other, disarmOther := s.Arm("b", ChangeFreed)
	if !s.Armed() {
		t.Fatal("not armed after Arm")
	}
	at := time.Now()
	s.Applied("a", ChangeFreed, at) // wrong kind
	s.Applied("b", ChangeBooked, at)
	s.Applied("a", ChangeBooked, at)
	s.Applied("a", ChangeBooked, at.Add(time.Second)) // fired already: dropped
	select {
	case got := <-ch:
		if !got.Equal(at) {
			t.Fatalf("stamp %v, want %v", got, at)
		}
	default:
		t.Fatal("the watch of a did not fire")
	}
	if len(ch) != 0 || len(other) != 0 {
		t.Fatalf("stamps left: a %d, b %d", len(ch), len(other))
	}
	disarm() // after firing: a no-op
	if !s.Armed() {
		t.Fatal("b's watch is gone")
	}
	disarmOther()
	if s.Armed() {
		t.Fatal("armed after every watch was disarmed")
	}
}
