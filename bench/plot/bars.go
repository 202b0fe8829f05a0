package plot

import (
	"math"
	"strconv"
)

// Bars is a grouped bar chart: one group per category (a worker), one bar
// per series (a policy) in each.
type Bars struct {
	Title, YLabel string
	Categories    []string
	Series        []BarSeries
}

// BarSeries is one series' value per category.
type BarSeries struct {
	Name   string
	Values []float64
}

func (b *Bars) height(w float64) float64 { return math.Round(w * 0.45) }

func (b *Bars) draw(cv *canvas, x0, y0, w float64) {
	h := b.height(w)
	const left, right, top, bottom = 70.0, 20.0, 40.0, 50.0
	pw, ph := w-left-right, h-top-bottom
	hi := 0.0
	for _, s := range b.Series {
		for _, v := range s.Values {
			hi = max(hi, v)
		}
	}
	step := niceStep(hi / 5)
	if hi <= 0 {
		step = 1
	}
	ymax := math.Ceil(hi/step) * step
	if ymax == 0 {
		ymax = step
	}
	yOf := func(v float64) float64 { return y0 + top + ph - v/ymax*ph }
	cv.group(b.Title)
	cv.text(x0+w/2, y0+22, b.Title, "middle", "#000000", 15, 0)
	cv.rect(x0+left, y0+top, pw, ph, "none", "#999999")
	for v := 0.0; v <= ymax+step/2; v += step {
		y := yOf(v)
		cv.line(x0+left, y, x0+left+pw, y, "#dddddd", 1, "")
		cv.text(x0+left-6, y+4, strconv.FormatFloat(v, 'g', 6, 64), "end", "#333333", 11, 0)
	}
	cv.text(x0+16, y0+top+ph/2, b.YLabel, "middle", "#333333", 12, -90)
	n := max(len(b.Categories), 1)
	gw := pw / float64(n)
	bw := gw * 0.8 / float64(max(len(b.Series), 1))
	for ci, cat := range b.Categories {
		gx := x0 + left + float64(ci)*gw + gw*0.1
		cv.text(gx+gw*0.4, y0+top+ph+16, cat, "middle", "#333333", 11, 0)
		for si, s := range b.Series {
			if ci >= len(s.Values) {
				continue
			}
			v := s.Values[ci]
			cv.rect(gx+float64(si)*bw, yOf(v), bw*0.95, y0+top+ph-yOf(v), color(si), "none")
		}
	}
	for si, s := range b.Series {
		cv.group(s.Name)
		lx := x0 + left + 10 + float64(si)*140
		cv.rect(lx, y0+top+6, 12, 12, color(si), "none")
		cv.text(lx+16, y0+top+16, s.Name, "start", "#000000", 12, 0)
		cv.end()
	}
	cv.end()
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
