package plot

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
)

// canvas accumulates one SVG document.
type canvas struct {
	b    bytes.Buffer
	w, h float64
}

func newCanvas(w, h float64) *canvas {
	c := &canvas{w: w, h: h}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="12">`+"\n",
		num(w), num(h), num(w), num(h))
	c.rect(0, 0, w, h, "#ffffff", "none")
	return c
}

// num formats a coordinate with at most two decimals.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func round2(v float64) float64 { return float64(int64(v*100+0.5*sign(v))) / 100 }

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}

// esc escapes text for an XML text node or attribute.
func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (c *canvas) rect(x, y, w, h float64, fill, stroke string) {
	fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="%s"/>`+"\n",
		num(round2(x)), num(round2(y)), num(round2(w)), num(round2(h)), fill, stroke)
}

func (c *canvas) line(x1, y1, x2, y2 float64, stroke string, width float64, dash string) {
	extra := ""
	if dash != "" {
		extra = ` stroke-dasharray="` + dash + `"`
	}
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		num(round2(x1)), num(round2(y1)), num(round2(x2)), num(round2(y2)), stroke, num(width), extra)
}

// text draws s at (x, y); anchor is start, middle or end; rotate in degrees.
func (c *canvas) text(x, y float64, s, anchor, fill string, size float64, rotate float64) {
	tr := ""
	if rotate != 0 {
		tr = fmt.Sprintf(` transform="rotate(%s %s %s)"`, num(rotate), num(round2(x)), num(round2(y)))
	}
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="%s" fill="%s" font-size="%s"%s>%s</text>`+"\n",
		num(round2(x)), num(round2(y)), anchor, fill, num(size), tr, esc(s))
}

func (c *canvas) circle(x, y, r float64, fill string) {
	fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="%s" fill="%s"/>`+"\n", num(round2(x)), num(round2(y)), num(r), fill)
}

// polyline draws a series; class names it (the series' data-series).
func (c *canvas) polyline(pts [][2]float64, stroke, dash, name string) {
	extra := ""
	if dash != "" {
		extra = ` stroke-dasharray="` + dash + `"`
	}
	fmt.Fprintf(&c.b, `<polyline fill="none" stroke="%s" stroke-width="2"%s data-series="%s" points="`, stroke, extra, esc(name))
	for i, p := range pts {
		if i > 0 {
			c.b.WriteByte(' ')
		}
		c.b.WriteString(num(round2(p[0])))
		c.b.WriteByte(',')
		c.b.WriteString(num(round2(p[1])))
	}
	c.b.WriteString(`"/>` + "\n")
}

// group opens a <g> carrying a title (a tooltip and an accessible name).
func (c *canvas) group(title string) {
	fmt.Fprintf(&c.b, "<g><title>%s</title>\n", esc(title))
}

func (c *canvas) end() { c.b.WriteString("</g>\n") }

func (c *canvas) writeTo(w io.Writer) error {
	c.b.WriteString("</svg>\n")
	_, err := w.Write(c.b.Bytes())
	return err
}

// palette are the series colors, distinguishable in print and for the
// common color-vision deficiencies (Okabe and Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

func color(i int) string { return palette[i%len(palette)] }

// dash tells apart the lines of series that share a color: solid for the
// first len(palette) series (a simulation with every policy has 11).
func dash(i int) string {
	return [...]string{"", "7 4", "2 3"}[i/len(palette)%3]
}
