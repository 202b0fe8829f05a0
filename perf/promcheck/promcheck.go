// Package promcheck reads a Prometheus text exposition as a strict scraper
// does, for tests: it parses it with the Prometheus text-format parser
// (github.com/prometheus/common/expfmt) and reports what a scraper or a
// dashboard would trip over. Only tests import it.
package promcheck

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Check parses exposition and returns its families by name and its
// problems: a parse error (which includes a repeated HELP or TYPE line and
// a TYPE line after the family's samples), a family without a TYPE line or
// with an empty HELP, and a series (name and label set) written twice.
func Check(exposition []byte) (map[string]*dto.MetricFamily, []string) {
	var problems []string
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		problems = append(problems, "parse: "+err.Error())
	}
	typed := map[string]bool{}
	seen := map[string]int{}
	for i, line := range strings.Split(string(exposition), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			typed[f[2]] = true
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		key := seriesKey(line)
		if first, dup := seen[key]; dup {
			problems = append(problems, fmt.Sprintf("line %d: series %s already written on line %d", i+1, key, first))
		} else {
			seen[key] = i + 1
		}
	}
	names := make([]string, 0, len(fams))
	for name := range fams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		mf := fams[name]
		if !typed[name] {
			problems = append(problems, fmt.Sprintf("%s: no # TYPE line", name))
		}
		if strings.TrimSpace(mf.GetHelp()) == "" {
			problems = append(problems, fmt.Sprintf("%s: no # HELP text", name))
		}
	}
	return fams, problems
}

// seriesKey is a sample line's name and label set, labels sorted.
func seriesKey(line string) string {
	name, rest, ok := strings.Cut(line, "{")
	if !ok {
		name, _, _ = strings.Cut(line, " ")
		return name
	}
	end := strings.LastIndexByte(rest, '}')
	if end < 0 {
		return line
	}
	labels := splitLabels(rest[:end])
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

// splitLabels splits `a="x",b="y, z"` at the commas outside quotes, and
// trims the blanks the text format allows around each pair.
func splitLabels(s string) []string {
	var out []string
	inQuote, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

// Names returns the family names a scrape exports, plus the series names
// of its histograms and summaries (name_bucket, name_sum, name_count), as
// a PromQL expression may use them.
func Names(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, mf := range fams {
		out[name] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out
}
