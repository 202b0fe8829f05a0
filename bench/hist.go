package bench

import (
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram records latencies in microseconds with two significant digits
// (1% relative error) from 1 µs to 100 s; larger values are clamped to 100 s
// and counted in Clamped. It is not safe for concurrent use: the drivers give
// every client goroutine its own and Merge them after the run. Two
// significant digits keep one at 21 KB, so 1,024 goroutines with two each
// cost 44 MB; three digits would cost 147 KB each.
type Histogram struct {
	h       *hdr.Histogram
	Clamped int64
}

const histMaxMicros = 100_000_000

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdr.New(1, histMaxMicros, 2)}
}

// spareHists keeps the client goroutines' histograms of finished windows
// for the next window's (reuseHistogram, recycle): a C1024 window takes
// 3,072 of them, 64 MB that every window allocated again, a fifth of a
// 5-round replica run's allocation and so of the GC cycles that mark the
// selectors' heap during the measurement. At most maxSpareHists are kept
// (about 86 MB).
var spareHists struct {
	sync.Mutex
	hs []*Histogram
}

const maxSpareHists = 4 << 10

// reuseHistogram returns an empty histogram, a recycled one if any.
func reuseHistogram() *Histogram {
	spareHists.Lock()
	defer spareHists.Unlock()
	if n := len(spareHists.hs); n > 0 {
		h := spareHists.hs[n-1]
		spareHists.hs[n-1] = nil
		spareHists.hs = spareHists.hs[:n-1]
		return h
	}
	return NewHistogram()
}

// recycle empties h and keeps it for reuseHistogram; the caller must not
// use h after.
func (h *Histogram) recycle() {
	h.h.Reset()
	h.Clamped = 0
	spareHists.Lock()
	defer spareHists.Unlock()
	if len(spareHists.hs) < maxSpareHists {
		spareHists.hs = append(spareHists.hs, h)
	}
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	}
	if us > histMaxMicros {
		us = histMaxMicros
		h.Clamped++
	}
	// Cannot fail: the value is within the trackable range.
	_ = h.h.RecordValue(us)
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	h.h.Merge(o.h)
	h.Clamped += o.Clamped
}

// Count is the number of samples.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Quantile returns the latency at quantile q in [0, 1] (0 when empty): the
// largest value that a fraction 1-q of the samples reach or exceed, within
// the histogram's 1% precision.
func (h *Histogram) Quantile(q float64) time.Duration {
	return time.Duration(h.h.ValueAtPercentile(q*100)) * time.Microsecond
}

// Max is the largest sample (within 1%).
func (h *Histogram) Max() time.Duration { return time.Duration(h.h.Max()) * time.Microsecond }

// Mean is the mean sample.
func (h *Histogram) Mean() time.Duration {
	return time.Duration(h.h.Mean() * float64(time.Microsecond))
}

// CDFPoint is one step of a latency distribution: Fraction of the samples
// took at most Ms milliseconds (within the histogram's 1% precision).
type CDFPoint struct {
	Ms       float64 `json:"ms"`
	Fraction float64 `json:"fraction"`
}

// CDF returns the distribution of the samples, one point per recorded
// bucket, ascending (nil when empty).
func (h *Histogram) CDF() []CDFPoint {
	total := h.h.TotalCount()
	if total == 0 {
		return nil
	}
	var out []CDFPoint
	var seen int64
	for _, b := range h.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		seen += b.Count
		out = append(out, CDFPoint{Ms: float64(b.To) / 1000, Fraction: float64(seen) / float64(total)})
	}
	return out
}
