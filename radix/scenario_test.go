package radix

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scripts in testdata/scenarios on an index of one
// shard, checking its invariants after every command. The scripts are
// datadriven files: a command line, "----", the expected output, a blank
// line; -rewrite (datadriven's flag) regenerates the outputs from the
// current code (review the diff before committing). Commands:
//
//	store W/R [tier=T] [parent=E] [start=N] E:L ...   (external:local hashes)
//	remove W/R [tier=T] E ...
//	clear W/R [tier=T]
//	remove-worker W
//	match L ...
//	hashes W/R LIMIT L ...
//	tree | dump | stats
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		ix, _ := New(Config{Shards: 1})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			got := runCommand(t, ix, d)
			if err := checkIndex(ix); err != nil {
				d.Fatalf(t, "invariant: %v", err)
			}
			return strings.TrimSpace(got)
		})
	})
}

// words returns d's arguments that are bare words (no "="), in order.
func words(t *testing.T, d *datadriven.TestData) []string {
	t.Helper()
	var out []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			out = append(out, a.Key)
		}
	}
	return out
}

// u64Words parses ws as numbers.
func u64Words(t *testing.T, ws []string) []uint64 {
	t.Helper()
	var out []uint64
	for _, w := range ws {
		out = append(out, parseU64(t, w))
	}
	return out
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
func runCommand(t *testing.T, ix *Index, d *datadriven.TestData) string {
	t.Helper()
	ws := words(t, d)
	before := ix.Stats()
	switch d.Cmd {
	case "store", "remove", "clear":
		ev := Event{Worker: parseWorker(t, ws[0])}
		ev.Kind = map[string]EventKind{"store": Stored, "remove": Removed, "clear": Cleared}[d.Cmd]
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "tier":
				tier, ok := ParseTier(a.SingleVal(t))
				if !ok {
					d.Fatalf(t, "bad tier %q", a.Vals[0])
				}
				ev.Tier = tier
			case "parent":
				ev.HasParent, ev.ParentHash = true, parseU64(t, a.SingleVal(t))
			case "start":
				ev.HasStartPosition, ev.StartPosition = true, uint32(parseU64(t, a.SingleVal(t)))
			default:
				if len(a.Vals) != 0 {
					d.Fatalf(t, "unknown argument %s", a)
				}
			}
		}
		for _, a := range ws[1:] {
			if e, l, ok := strings.Cut(a, ":"); ok {
				ev.Blocks = append(ev.Blocks, Block{Hash: parseU64(t, e), Local: parseU64(t, l)})
			} else {
				ev.Hashes = append(ev.Hashes, parseU64(t, a))
			}
		}
		ix.Apply(&ev)
		return describeDelta(before, ix.Stats())
	case "remove-worker":
		ix.RemoveWorker(parseU64(t, ws[0]))
		return describeDelta(before, ix.Stats())
	case "match":
		var r Result
		ix.Match(u64Words(t, ws), &r)
		slices.SortFunc(r.Matches, func(a, b Match) int { return cmpKey(a.Worker, b.Worker) })
		var b strings.Builder
		for _, m := range r.Matches {
			gpu, cpu, disk := m.Cumulative()
			fmt.Fprintf(&b, "%v device=%d host=%d disk=%d external=%d cumulative=%d/%d/%d\n", m.Worker, m.Device, m.Host, m.Disk, m.External, gpu, cpu, disk)
		}
		if b.Len() == 0 {
			return "no match"
		}
		return b.String()
	case "hashes":
		w := parseWorker(t, ws[0])
		limit := int(parseU64(t, ws[1]))
		return fmt.Sprint(ix.PrefixHashes(nil, w, u64Words(t, ws[2:]), limit))
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
	d.Fatalf(t, "unknown command %q", d.Cmd)
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
