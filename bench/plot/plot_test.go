package plot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// parseSVG reads doc to its end as XML, failing on any error, and returns
// the data-series of its polylines and its texts.
func parseSVG(t *testing.T, doc []byte) (series, texts []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var inText bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%.400s", err, doc)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			inText = tk.Name.Local == "text"
			if tk.Name.Local == "polyline" {
				for _, a := range tk.Attr {
					if a.Name.Local == "data-series" {
						series = append(series, a.Value)
					}
				}
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(tk))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return series, texts
}

func lognormal(r *rand.Rand, n int, mu float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Exp(mu + 0.8*r.NormFloat64())
	}
	return out
}

// TestCDFAndBarsSVG: a two-series CDF with quantile marks and a bar chart
// render as one well-formed SVG that carries both series (as polylines),
// their names, the marks' labels and the categories; the HTML page embeds
// the same figures and no script.
func TestCDFAndBarsSVG(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sel := CDFOf(lognormal(r, 5000, -2))
	noop := CDFOf(lognormal(r, 5000, -4))
	cdf := &CDF{Title: "latency <per call> & more", XLabel: "latency (ms)", Unit: "ms", Series: []Series{
		{Name: "selector", Points: sel, Marks: QuantileMarks(sel, 0.5, 0.99, 0.999)},
		{Name: "no-op baseline", Points: noop, Marks: QuantileMarks(noop, 0.5, 0.99, 0.999)},
	}}
	bars := &Bars{Title: "requests per worker", YLabel: "requests", Categories: []string{"w1", "w2", "w3"},
		Series: []BarSeries{{"kvselect", []float64{10, 12, 11}}, {"random", []float64{3, 20, 9}}}}
	var b bytes.Buffer
	if err := WriteSVG(&b, cdf, bars); err != nil {
		t.Fatal(err)
	}
	series, texts := parseSVG(t, b.Bytes())
	if strings.Join(series, ",") != "selector,no-op baseline" {
		t.Fatalf("polylines %v", series)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"latency <per call> & more", "selector", "no-op baseline", "p50 ", "p99 ", "p99.9 ", "w1", "w3", "kvselect", "random", "0.999"} {
		if !strings.Contains(all, want) {
			t.Errorf("no text %q in %s", want, all)
		}
	}
	var h bytes.Buffer
	if err := WriteHTML(&h, "kvselect bench", cdf, bars); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	if strings.Count(page, "<svg ") != 2 || strings.Contains(strings.ToLower(page), "<script") || strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Fatalf("page: %.300s", page)
	}
	for _, part := range strings.Split(page, "<figure>")[1:] {
		svg := part[:strings.Index(part, "</figure>")]
		parseSVG(t, []byte(svg))
	}
}

func TestCDFOfAndMarks(t *testing.T) {
	pts := CDFOf([]float64{3, 1, 2, 2, 0, -1, math.Inf(1)})
	want := []Point{{1, 0.25}, {2, 0.75}, {3, 1}}
	if len(pts) != len(want) {
		t.Fatalf("%v", pts)
	}
	for i := range want {
		if pts[i] != want[i] {
			t.Fatalf("%v, want %v", pts, want)
		}
	}
	m := QuantileMarks(pts, 0.5, 0.999)
	if len(m) != 2 || m[0].Label != "p50" || m[0].Value != 2 || m[1].Label != "p99.9" || m[1].Value != 3 {
		t.Fatalf("marks %v", m)
	}
	if y := nines(0.99, 4); math.Abs(y-2) > 1e-9 {
		t.Fatalf("nines(0.99) = %v", y)
	}
	if nines(1, 4) != 4 || nines(0.999999, 4) != 4 {
		t.Fatal("nines not capped at the top")
	}
	if got := niceStep(0.37); got != 0.5 {
		t.Fatalf("niceStep(0.37) = %v", got)
	}
}
