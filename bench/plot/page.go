package plot

import (
	"fmt"
	"io"
	"strings"
)

// Chart is a CDF or Bars.
type Chart interface {
	height(w float64) float64
	draw(cv *canvas, x0, y0, w float64)
}

// width is every chart's width in pixels.
const width = 900

// WriteSVG writes the charts, one under another, as one SVG document.
func WriteSVG(w io.Writer, charts ...Chart) error {
	total := 0.0
	for _, c := range charts {
		total += c.height(width)
	}
	cv := newCanvas(width, total)
	y := 0.0
	for _, c := range charts {
		c.draw(cv, 0, y, width)
		y += c.height(width)
	}
	return cv.writeTo(w)
}

// WriteHTML writes a page with a title and each chart as an inline SVG:
// one self-contained file, no script.
func WriteHTML(w io.Writer, title string, charts ...Chart) error {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title></head>\n<body style=\"font-family:sans-serif\">\n<h1>%s</h1>\n", esc(title), esc(title))
	for _, c := range charts {
		b.WriteString("<figure>\n")
		if err := WriteSVG(&b, c); err != nil {
			return err
		}
		b.WriteString("</figure>\n")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
