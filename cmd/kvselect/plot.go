package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/plot"
	"github.com/kvselect/kvselect/bench/sim"
)

// checkPlotPath validates --plot before the run: .svg or .html.
func checkPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".html", ".htm":
		return nil
	}
	return fmt.Errorf("--plot %s: the file must end in .svg or .html", path)
}

// writePlot writes charts to path: one SVG, or an HTML page of SVGs.
func writePlot(path, title string, charts ...plot.Chart) error {
	var b bytes.Buffer
	var err error
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		err = plot.WriteSVG(&b, charts...)
	} else {
		err = plot.WriteHTML(&b, title, charts...)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// latencySeries turns a bench latency distribution into a plot series
// with its p50, p99 and p99.9 marked.
func latencySeries(name string, cdf []bench.CDFPoint) plot.Series {
	pts := make([]plot.Point, len(cdf))
	for i, p := range cdf {
		pts[i] = plot.Point{Value: p.Ms, Fraction: p.Fraction}
	}
	return plot.Series{Name: name, Points: pts, Marks: plot.QuantileMarks(pts, 0.5, 0.99, 0.999)}
}

// plotLoad is --plot for a load run: the latency CDF of the selector and,
// in the same run, of the no-op baseline, on one chart.
func plotLoad(path string, rep *bench.Report) error {
	c := &plot.CDF{Title: fmt.Sprintf("kvselect bench: latency per call, %s mix, %d clients", rep.Mix, rep.Concurrency), XLabel: "latency (ms)", Unit: "ms",
		Series: []plot.Series{latencySeries("selector", rep.LatencyCDF)}}
	if rep.Baseline != nil {
		c.Series = append(c.Series, latencySeries("no-op baseline", rep.Baseline.LatencyCDF))
	}
	return writePlot(path, "kvselect bench", c)
}

// plotSimulation is --plot for --simulate: every policy's TTFT CDF at each
// load level, then the requests and the prefilled tokens per worker at
// the highest level, one bar per policy.
func plotSimulation(path string, rep *sim.Report) error {
	var charts []plot.Chart
	levels := rep.Levels
	if len(levels) == 0 {
		levels = []*sim.Level{{Policies: rep.Policies}}
	}
	for _, lv := range levels {
		title := "kvselect bench --simulate: time to first token per policy"
		switch {
		case lv.Load > 0:
			title += fmt.Sprintf(", load %.0f%%", 100*lv.Load)
		case lv.ArrivalRPS > 0:
			title += fmt.Sprintf(", %.2f requests/s", lv.ArrivalRPS)
		}
		cdf := &plot.CDF{Title: title, XLabel: "simulated TTFT (ms)", Unit: "ms"}
		for _, name := range policyOrder(lv.Policies) {
			pts := plot.CDFOf(lv.Policies[name].TTFTms)
			cdf.Series = append(cdf.Series, plot.Series{Name: name, Points: pts, Marks: plot.QuantileMarks(pts, 0.5, 0.99)})
		}
		charts = append(charts, cdf)
	}
	reqs := &plot.Bars{Title: "requests per worker (highest load)", YLabel: "requests"}
	prefill := &plot.Bars{Title: "prefilled tokens per worker (not cached; highest load)", YLabel: "tokens"}
	for i := range rep.Workers {
		cat := "w" + strconv.Itoa(i+1)
		reqs.Categories = append(reqs.Categories, cat)
		prefill.Categories = append(prefill.Categories, cat)
	}
	for _, name := range policyOrder(rep.Policies) {
		r := rep.Policies[name]
		rs, ps := plot.BarSeries{Name: name}, plot.BarSeries{Name: name}
		for _, n := range r.RequestsPerWorker {
			rs.Values = append(rs.Values, float64(n))
		}
		for _, n := range r.PrefillTokensPerWorker {
			ps.Values = append(ps.Values, float64(n))
		}
		reqs.Series = append(reqs.Series, rs)
		prefill.Series = append(prefill.Series, ps)
	}
	return writePlot(path, "kvselect bench --simulate", append(charts, reqs, prefill)...)
}

// policyOrder is kvselect first, then the others by name: the same colors
// in every chart and run.
func policyOrder(policies map[string]*sim.PolicyResult) []string {
	names := make([]string, 0, len(policies))
	for name := range policies {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == sim.PolicyKVSelect:
			return -1
		case b == sim.PolicyKVSelect:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}
