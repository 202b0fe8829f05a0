package plot

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Point is one step of a CDF: Fraction of the samples are at or below
// Value. A series' points ascend in both.
type Point struct {
	Value, Fraction float64
}

// Mark is a labelled point of a series (a quantile: "p99" at 1.2 ms).
type Mark struct {
	Label           string
	Value, Fraction float64
}

// Series is one named distribution.
type Series struct {
	Name   string
	Points []Point
	Marks  []Mark
}

// CDF is a chart of distributions on a log latency axis and a nines
// fraction axis (see the package doc).
type CDF struct {
	Title, XLabel string
	// Unit follows the values of marks ("ms").
	Unit   string
	Series []Series
}

// CDFOf returns the CDF of samples (any order; non-positive ones are
// dropped, the log axis cannot show them): one point per distinct value.
func CDFOf(samples []float64) []Point {
	s := slices.Clone(samples)
	s = slices.DeleteFunc(s, func(v float64) bool { return !(v > 0) || math.IsInf(v, 0) })
	slices.Sort(s)
	var out []Point
	for i, v := range s {
		f := float64(i+1) / float64(len(s))
		if n := len(out); n > 0 && out[n-1].Value == v {
			out[n-1].Fraction = f
			continue
		}
		out = append(out, Point{v, f})
	}
	return out
}

// QuantileMarks returns marks at quantiles qs of points: the first value
// whose fraction reaches q, labelled "p50", "p99", "p99.9".
func QuantileMarks(points []Point, qs ...float64) []Mark {
	var out []Mark
	for _, q := range qs {
		i := slices.IndexFunc(points, func(p Point) bool { return p.Fraction >= q-1e-12 })
		if i < 0 {
			continue
		}
		out = append(out, Mark{Label: "p" + strconv.FormatFloat(q*100, 'f', -1, 64), Value: points[i].Value, Fraction: q})
	}
	return out
}

// nines maps a fraction to the y axis: -log10(1-f), capped at top.
func nines(f, top float64) float64 {
	if f >= 1 {
		return top
	}
	return min(-math.Log10(1-f), top)
}

// height is the chart's height for a given width.
func (c *CDF) height(w float64) float64 { return math.Round(w * 0.6) }

func (c *CDF) draw(cv *canvas, x0, y0, w float64) {
	h := c.height(w)
	const left, right, top, bottom = 70.0, 20.0, 40.0, 50.0
	pw, ph := w-left-right, h-top-bottom
	// Domains.
	lo, hi := math.Inf(1), math.Inf(-1)
	topNines := 3.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			lo, hi = min(lo, p.Value), max(hi, p.Value)
			if p.Fraction < 1 {
				topNines = max(topNines, math.Ceil(-math.Log10(1-p.Fraction)-1e-9))
			}
		}
	}
	topNines = min(topNines, 6)
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	xOf := func(v float64) float64 { return x0 + left + (math.Log10(v)-dlo)/(dhi-dlo)*pw }
	yOf := func(f float64) float64 { return y0 + top + ph - nines(f, topNines)/topNines*ph }

	cv.group(c.Title)
	cv.text(x0+w/2, y0+22, c.Title, "middle", "#000000", 15, 0)
	cv.rect(x0+left, y0+top, pw, ph, "none", "#999999")
	// x ticks: every decade, labelled.
	for d := dlo; d <= dhi; d++ {
		x := x0 + left + (d-dlo)/(dhi-dlo)*pw
		cv.line(x, y0+top, x, y0+top+ph, "#dddddd", 1, "")
		cv.text(x, y0+top+ph+16, strconv.FormatFloat(math.Pow(10, d), 'g', -1, 64), "middle", "#333333", 11, 0)
	}
	cv.text(x0+left+pw/2, y0+h-12, c.XLabel+", log scale", "middle", "#333333", 12, 0)
	// y ticks: 0, 0.9, 0.99, ... and 0.5.
	for _, f := range append([]float64{0, 0.5}, ninesTicks(topNines)...) {
		y := yOf(f)
		cv.line(x0+left, y, x0+left+pw, y, "#dddddd", 1, "")
		cv.text(x0+left-6, y+4, strconv.FormatFloat(f, 'f', -1, 64), "end", "#333333", 11, 0)
	}
	cv.text(x0+16, y0+top+ph/2, "fraction at or below (nines scale)", "middle", "#333333", 12, -90)
	// Each series: its steps, a dot at each mark, and a legend line with
	// the marks' values (labels on the curves would cover each other).
	for i, s := range c.Series {
		pts := make([][2]float64, 0, 2*len(s.Points)+1)
		prev := 0.0
		for _, p := range s.Points {
			// A step: up at the value, from the previous fraction.
			x := xOf(p.Value)
			pts = append(pts, [2]float64{x, yOf(prev)}, [2]float64{x, yOf(p.Fraction)})
			prev = p.Fraction
		}
		cv.group(s.Name)
		cv.polyline(pts, color(i), dash(i), s.Name)
		var legend strings.Builder
		legend.WriteString(s.Name)
		for _, m := range s.Marks {
			cv.circle(xOf(m.Value), yOf(m.Fraction), 4, color(i))
			fmt.Fprintf(&legend, "   %s %s %s", m.Label, fmtValue(m.Value), c.Unit)
		}
		cv.end()
		// Legend.
		ly := y0 + top + 16 + float64(i)*16
		cv.line(x0+left+10, ly-4, x0+left+34, ly-4, color(i), 3, dash(i))
		cv.text(x0+left+40, ly, legend.String(), "start", "#000000", 12, 0)
	}
	cv.end()
}

// fmtValue prints a mark's value with three significant digits, never in
// exponent form.
func fmtValue(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ninesTicks are 0.9, 0.99, ... up to top nines.
func ninesTicks(top float64) []float64 {
	var out []float64
	for k := 1.0; k <= top; k++ {
		out = append(out, 1-math.Pow(10, -k))
	}
	return out
}
