package ratelog

import (
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	var b Limiter
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := b.Allow(t0, 3, 10*time.Second); !ok {
			t.Fatalf("line %d of the burst refused", i)
		}
	}
	for range 5 {
		if ok, _ := b.Allow(t0.Add(time.Second), 3, 10*time.Second); ok {
			t.Fatal("a line past the burst allowed")
		}
	}
	// One token back after 10 s: the line reports the 5 suppressed.
	if ok, sup := b.Allow(t0.Add(11*time.Second), 3, 10*time.Second); !ok || sup != 5 {
		t.Fatalf("after the refill: ok %v, suppressed %d, want true, 5", ok, sup)
	}
	if ok, _ := b.Allow(t0.Add(11*time.Second), 3, 10*time.Second); ok {
		t.Fatal("a second line in the same period allowed")
	}
	// A long quiet period refills to the burst, no more.
	n := 0
	for range 10 {
		if ok, _ := b.Allow(t0.Add(time.Hour), 3, 10*time.Second); ok {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d lines after an hour, want the burst of 3", n)
	}
	// A clock going backwards neither refills nor breaks.
	if ok, _ := b.Allow(t0, 3, 10*time.Second); ok {
		t.Fatal("a line allowed by a clock going backwards")
	}
}
