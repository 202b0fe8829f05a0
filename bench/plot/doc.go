// Package plot draws the pictures of `kvselect bench`: latency CDFs on a
// logarithmic latency axis and grouped bar charts, as self-contained SVG
// (or an HTML page embedding the SVGs): no script, no font or style from
// the network, nothing but the figures. It knows nothing of the harness:
// callers hand it series of numbers.
//
// # The CDF axes
//
// x is the latency on a log10 scale (decades from the smallest to the
// largest sample). y is the fraction of samples at or below x on a
// "nines" scale, y = -log10(1 - fraction), ticks at 0.5, 0.9, 0.99, 0.999
// and 0.9999, so that the tail a linear axis squeezes into its top pixel
// (p99, p99.9) gets as much room as the median. A fraction of 1 (the
// largest sample) is drawn at the top of the axis.
package plot
