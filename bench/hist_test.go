package bench

import (
	"math"
	"testing"
	"time"
)

func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

func TestHistogramPercentiles(t *testing.T) {
	h := NewHistogram()
	if h.Quantile(0.99) != 0 || h.Count() != 0 {
		t.Fatal("an empty histogram must report 0")
	}
	for i := 1; i <= 10000; i++ { // 1 µs .. 10 ms, uniform
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}} {
		if got := h.Quantile(c.q); !within(got, c.want, 0.01) {
			t.Errorf("q%v = %v, want %v within 1%%", c.q, got, c.want)
		}
	}
	if !within(h.Max(), 10*time.Millisecond, 0.01) || !within(h.Mean(), 5*time.Millisecond, 0.01) {
		t.Errorf("max %v mean %v", h.Max(), h.Mean())
	}
}

func TestHistogramMergeEqualsOne(t *testing.T) {
	one := NewHistogram()
	parts := []*Histogram{NewHistogram(), NewHistogram(), NewHistogram()}
	for i := range 30000 {
		d := time.Duration(i*i%977+1) * 37 * time.Microsecond
		one.Record(d)
		parts[i%3].Record(d)
	}
	merged := NewHistogram()
	for _, p := range parts {
		merged.Merge(p)
	}
	if merged.Count() != one.Count() {
		t.Fatalf("count %d, want %d", merged.Count(), one.Count())
	}
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		if merged.Quantile(q) != one.Quantile(q) {
			t.Errorf("q%v: merged %v, single %v", q, merged.Quantile(q), one.Quantile(q))
		}
	}
}

func TestHistogramClamps(t *testing.T) {
	h := NewHistogram()
	h.Record(-time.Second)
	h.Record(time.Hour)
	if h.Count() != 2 || h.Clamped != 1 || h.Quantile(0) != 0 || !within(h.Max(), 100*time.Second, 0.01) {
		t.Fatalf("count %d clamped %d min %v max %v", h.Count(), h.Clamped, h.Quantile(0), h.Max())
	}
}

// TestHistogramCDF: the CDF ascends to 1, and its fraction at a sample's
// value agrees with Quantile.
func TestHistogramCDF(t *testing.T) {
	h := NewHistogram()
	if h.CDF() != nil {
		t.Fatal("an empty histogram has a CDF")
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	cdf := h.CDF()
	for i := 1; i < len(cdf); i++ {
		if cdf[i].Ms <= cdf[i-1].Ms || cdf[i].Fraction <= cdf[i-1].Fraction {
			t.Fatalf("not ascending at %d: %v %v", i, cdf[i-1], cdf[i])
		}
	}
	if last := cdf[len(cdf)-1]; last.Fraction != 1 || math.Abs(last.Ms-1.0) > 0.011 {
		t.Fatalf("last point %v, want fraction 1 at ~1 ms", last)
	}
	p99 := float64(h.Quantile(0.99).Microseconds()) / 1000
	for _, p := range cdf {
		if p.Ms >= p99 {
			if p.Fraction < 0.99 || p.Fraction > 0.995 {
				t.Fatalf("fraction %v at the p99 %v ms", p.Fraction, p99)
			}
			break
		}
	}
}

// TestHistogramRecycle: a recycled histogram comes back empty, and the
// spare list keeps at most maxSpareHists.
func TestHistogramRecycle(t *testing.T) {
	h := reuseHistogram()
	h.Record(3 * time.Millisecond)
	h.Record(200 * time.Second) // clamped
	h.recycle()
	got := reuseHistogram()
	if got.Count() != 0 || got.Clamped != 0 || got.Max() != 0 {
		t.Fatalf("reused histogram not empty: %d samples, %d clamped, max %v", got.Count(), got.Clamped, got.Max())
	}
	for range maxSpareHists + 10 {
		NewHistogram().recycle()
	}
	spareHists.Lock()
	n := len(spareHists.hs)
	spareHists.hs = nil
	spareHists.Unlock()
	if n != maxSpareHists {
		t.Fatalf("%d spare histograms kept, want the bound %d", n, maxSpareHists)
	}
}
