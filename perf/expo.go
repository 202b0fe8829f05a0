package perf

import (
	"bytes"
	"io"
	"strings"
)

// Kind is a metric family's Prometheus type.
type Kind string

// The kinds the registry describes.
const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
)

// Desc describes one metric family: its name (no labels, no _bucket/_sum/
// _count suffix), its type and its help text.
type Desc struct {
	Name string
	Kind Kind
	Help string
}

// Describe registers the HELP and TYPE of families the registry's handles
// or its OnScrape writers produce. Call at start-up; describing a family
// twice with another kind or text is a bug.
func (r *Registry) Describe(ds ...Desc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ds {
		if d.Name == "" || d.Kind == "" || d.Help == "" {
			panic("BUG: perf: incomplete description of " + d.Name)
		}
		if old, ok := r.descs[d.Name]; ok && old != d {
			panic("BUG: perf: " + d.Name + " described twice differently")
		}
		r.descs[d.Name] = d
	}
}

// Described returns the families registered with Describe.
func (r *Registry) Described() []Desc {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Desc, 0, len(r.descs))
	for _, d := range r.descs {
		out = append(out, d)
	}
	return out
}

// family is one metric family's sample lines, in the order written.
type family struct {
	name  string
	lines [][]byte
}

// writeGrouped rewrites an exposition so that every family appears once,
// as one block under one # HELP and one # TYPE line, in the order families
// first appear. The VictoriaMetrics library writes metadata per family
// only inside one Set, with an empty HELP, and scrape-time writers add
// their lines after the Set's, one line at a time; a family whose series
// come from two writers (or one writer's loop) would otherwise be split,
// and Prometheus rejects a repeated TYPE. Sample lines are kept as they
// are (a duplicate series stays visible, for tests to catch).
//
// Types come from Describe, else from the library's own TYPE lines; help
// from Describe, else from the library, else runtimeHelp.
func (r *Registry) writeGrouped(w io.Writer, src []byte) {
	r.mu.Lock()
	descs := r.descs
	r.mu.Unlock()
	libType := map[string]string{}
	libHelp := map[string]string{}
	index := map[string]*family{}
	var order []*family
	for len(src) > 0 {
		var line []byte
		line, src, _ = bytes.Cut(src, []byte("\n"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if line[0] == '#' {
			f := strings.Fields(string(line))
			if len(f) >= 4 && f[1] == "TYPE" {
				libType[f[2]] = f[3]
			} else if len(f) >= 4 && f[1] == "HELP" {
				libHelp[f[2]] = strings.Join(f[3:], " ")
			}
			continue
		}
		name := sampleName(line)
		fam := familyOf(name, descs, libType)
		g := index[fam]
		if g == nil {
			g = &family{name: fam}
			index[fam] = g
			order = append(order, g)
		}
		g.lines = append(g.lines, line)
	}
	var b bytes.Buffer
	for _, g := range order {
		kind, help := "untyped", ""
		if d, ok := descs[g.name]; ok {
			kind, help = string(d.Kind), d.Help
		} else {
			if t, ok := libType[g.name]; ok {
				kind = t
			}
			help = libHelp[g.name]
			if help == "" {
				help = runtimeHelp(g.name)
			}
		}
		b.WriteString("# HELP ")
		b.WriteString(g.name)
		if help != "" {
			b.WriteByte(' ')
			b.WriteString(escapeHelp(help))
		}
		b.WriteString("\n# TYPE ")
		b.WriteString(g.name)
		b.WriteByte(' ')
		b.WriteString(kind)
		b.WriteByte('\n')
		for _, l := range g.lines {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	_, _ = w.Write(b.Bytes())
}

// sampleName returns the metric name of a sample line.
func sampleName(line []byte) string {
	if i := bytes.IndexAny(line, "{ "); i >= 0 {
		return string(line[:i])
	}
	return string(line)
}

// familyOf maps a sample's name to its family: itself, or for the
// _bucket, _sum and _count series of a histogram or summary, the base.
func familyOf(name string, descs map[string]Desc, libType map[string]string) string {
	if _, ok := descs[name]; ok {
		return name
	}
	if _, ok := libType[name]; ok {
		return name
	}
	for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if d, ok := descs[base]; ok && d.Kind == Histogram {
			return base
		}
		if t := libType[base]; t == "histogram" || t == "summary" {
			return base
		}
	}
	return name
}

// escapeHelp escapes a HELP text as the text format requires.
func escapeHelp(s string) string {
	if !strings.ContainsAny(s, "\\\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
