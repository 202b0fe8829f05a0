package radix

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden outputs of scenario tests")

// TestScenarios runs the scripts in testdata/scenarios (see runGolden) on
// an index of one shard, checking its invariants after every command.
func TestScenarios(t *testing.T) {
	runGolden(t, "testdata/scenarios/*.txt", func(t *testing.T) func(string) string {
		ix, _ := New(Config{Shards: 1})
		return func(cmd string) string {
			got := runCommand(t, ix, cmd)
			if err := checkIndex(ix); err != nil {
				t.Fatalf("%s: invariant: %v", cmd, err)
			}
			return got
		}
	})
}

// runGolden runs every file matching glob as a golden script: blocks of a
// command line, a "----" line and the expected output, separated by blank
// lines. start begins a file and returns the step that runs one command
// and returns its output. -rewrite regenerates the outputs from the
// current code (review the diff before committing).
func runGolden(t *testing.T, glob string, start func(t *testing.T) func(cmd string) string) {
	files, _ := filepath.Glob(glob)
	if len(files) == 0 {
		t.Fatalf("no files match %s", glob)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			step := start(t)
			var out strings.Builder
			for block := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n\n") {
				cmd, want, _ := strings.Cut(block, "\n----\n")
				cmd = strings.TrimSuffix(cmd, "\n----")
				got := step(cmd)
				if !*rewrite && strings.TrimSpace(got) != strings.TrimSpace(want) {
					t.Errorf("%s\n got:\n%s\nwant:\n%s", cmd, got, want)
				}
				fmt.Fprintf(&out, "%s\n----\n%s\n\n", cmd, strings.TrimSpace(got))
			}
			if *rewrite {
				if err := os.WriteFile(file, []byte(strings.TrimSpace(out.String())+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func parseWorker(t *testing.T, s string) WorkerKey {
	id, rank, _ := strings.Cut(s, "/")
	w, err1 := strconv.ParseUint(id, 10, 64)
	r, err2 := strconv.ParseUint(rank, 10, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad worker %q", s)
	}
	return WorkerKey{w, uint32(r)}
}

func parseU64(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return v
}

// runCommand executes one scenario command and returns its output.
func runCommand(t *testing.T, ix *Index, line string) string {
	t.Helper()
	f := strings.Fields(line)
	before := ix.Stats()
	switch f[0] {
	case "store", "remove", "clear":
		ev := Event{Worker: parseWorker(t, f[1])}
		ev.Kind = map[string]EventKind{"store": Stored, "remove": Removed, "clear": Cleared}[f[0]]
		for _, a := range f[2:] {
			switch {
			case strings.HasPrefix(a, "tier="):
				tier, ok := ParseTier(a[5:])
				if !ok {
					t.Fatalf("bad tier %q", a)
				}
				ev.Tier = tier
			case strings.HasPrefix(a, "parent="):
				ev.HasParent, ev.ParentHash = true, parseU64(t, a[7:])
			case strings.HasPrefix(a, "start="):
				ev.HasStartPosition, ev.StartPosition = true, uint32(parseU64(t, a[6:]))
			case strings.Contains(a, ":"):
				e, l, _ := strings.Cut(a, ":")
				ev.Blocks = append(ev.Blocks, Block{Hash: parseU64(t, e), Local: parseU64(t, l)})
			default:
				ev.Hashes = append(ev.Hashes, parseU64(t, a))
			}
		}
		ix.Apply(&ev)
		return describeDelta(before, ix.Stats())
	case "remove-worker":
		ix.RemoveWorker(parseU64(t, f[1]))
		return describeDelta(before, ix.Stats())
	case "match":
		var q []uint64
		for _, a := range f[1:] {
			q = append(q, parseU64(t, a))
		}
		var r Result
		ix.Match(q, &r)
		slices.SortFunc(r.Matches, func(a, b Match) int { return cmpKey(a.Worker, b.Worker) })
		var b strings.Builder
		for _, m := range r.Matches {
			g, c, d := m.Cumulative()
			fmt.Fprintf(&b, "%v device=%d host=%d disk=%d external=%d cumulative=%d/%d/%d\n", m.Worker, m.Device, m.Host, m.Disk, m.External, g, c, d)
		}
		if b.Len() == 0 {
			return "no match"
		}
		return b.String()
	case "hashes":
		w := parseWorker(t, f[1])
		limit := int(parseU64(t, f[2]))
		var q []uint64
		for _, a := range f[3:] {
			q = append(q, parseU64(t, a))
		}
		return fmt.Sprint(ix.PrefixHashes(nil, w, q, limit))
	case "tree":
		var b strings.Builder
		printNode(&b, &ix.shards[0].tree.root, 0)
		return b.String()
	case "dump":
		var b strings.Builder
		for _, ev := range ix.Dump() {
			b.Write(AppendEventJSON(nil, &ev))
			b.WriteByte('\n')
		}
		return b.String()
	case "stats":
		st := ix.Stats()
		return fmt.Sprintf("blocks=%v workers=%d applied=%d dropped=%v", st.Blocks, st.Workers, st.EventsApplied, st.Dropped)
	}
	t.Fatalf("unknown command %q", line)
	return ""
}

func describeDelta(a, b Stats) string {
	var parts []string
	for r := range numDropReasons {
		if d := b.Dropped[r] - a.Dropped[r]; d > 0 {
			parts = append(parts, fmt.Sprintf("dropped %s x%d", DropReason(r), d))
		}
	}
	parts = append(parts, fmt.Sprintf("blocks=%v", b.Blocks))
	return strings.Join(parts, "; ")
}

func printNode(b *strings.Builder, n *node, indent int) {
	st := n.state.Load()
	if indent > 0 {
		fmt.Fprintf(b, "%s%v", strings.Repeat("  ", indent-1), st.edge)
		for _, o := range st.owners {
			fmt.Fprintf(b, " %v=%v", o.key, o.ext)
		}
		b.WriteByte('\n')
	}
	var keys []uint64
	st.children.each(func(h uint64, _ *node) { keys = append(keys, h) })
	slices.Sort(keys)
	for _, k := range keys {
		printNode(b, st.children.get(k), indent+1)
	}
}
