package radix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// epoch is the scenarios' time origin; t=S in a script is epoch+S seconds.
var epoch = time.Unix(1_700_000_000, 0)

// at returns the time of d's t=<seconds> argument.
func at(t *testing.T, d *datadriven.TestData) time.Time {
	t.Helper()
	var secs float64
	d.ScanArgs(t, "t", &secs)
	return epoch.Add(time.Duration(secs * float64(time.Second)))
}

// TestApproxScenarios runs testdata/approx/*.txt, datadriven files as
// TestScenarios runs; the first command of a file may be
// "config ttl=<dur> max=<blocks>". Time is only what the script says
// (t=<seconds>). Commands:
//
//	config [ttl=D] [max=N]
//	record W/R t=S L ...
//	expire t=S
//	clear W/R
//	remove-worker W
//	match L ...
//	timers
func TestApproxScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/approx", func(t *testing.T, path string) {
		var a *Approx
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if a == nil {
				a = newScenarioApprox(t, d)
			}
			got := runApprox(t, a, d)
			if err := checkApprox(a); err != nil {
				d.Fatalf(t, "invariant: %v", err)
			}
			return strings.TrimSpace(got)
		})
	})
}

// newScenarioApprox returns the Approx of a file whose first command is
// d: its config if d is one, the defaults otherwise.
func newScenarioApprox(t *testing.T, d *datadriven.TestData) *Approx {
	cfg := ApproxConfig{TTL: DefaultApproxTTL}
	if d.Cmd == "config" {
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "ttl":
				d.ScanArgs(t, "ttl", &cfg.TTL)
			case "max":
				d.ScanArgs(t, "max", &cfg.MaxBlocks)
			default:
				d.Fatalf(t, "bad config %s", a)
			}
		}
	}
	a, err := NewApprox(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func runApprox(t *testing.T, a *Approx, d *datadriven.TestData) string {
	t.Helper()
	ws := words(t, d)
	switch d.Cmd {
	case "config":
		return fmt.Sprintf("ttl=%v max=%d prune-to=%d", time.Duration(a.ttl), a.maxBlocks, a.target)
	case "record":
		a.Record(parseWorker(t, ws[0]), u64Words(t, ws[1:]), at(t, d))
		return approxSummary(a)
	case "expire":
		n := a.Expire(at(t, d))
		return fmt.Sprintf("expired %d; %s", n, approxSummary(a))
	case "clear":
		a.ClearRank(parseWorker(t, ws[0]))
		return approxSummary(a)
	case "remove-worker":
		a.RemoveWorker(parseU64(t, ws[0]))
		return approxSummary(a)
	case "match":
		var r Result
		a.Match(u64Words(t, ws), &r)
		slices.SortFunc(r.Matches, func(x, y Match) int { return cmpKey(x.Worker, y.Worker) })
		var b strings.Builder
		for _, m := range r.Matches {
			fmt.Fprintf(&b, "%v device=%d\n", m.Worker, m.Device)
		}
		if b.Len() == 0 {
			return "no match"
		}
		return b.String()
	case "timers":
		var b strings.Builder
		for _, bk := range a.mu.t.buckets {
			var es []string
			for i := bk.head; i >= 0; i = a.mu.t.slots[i].next {
				s := a.mu.t.slots[i]
				es = append(es, fmt.Sprintf("%v@%d", s.w, s.pos))
			}
			fmt.Fprintf(&b, "t=%.1f %s\n", time.Unix(0, bk.at).Sub(epoch).Seconds(), strings.Join(es, " "))
		}
		if b.Len() == 0 {
			return "none"
		}
		return b.String()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func approxSummary(a *Approx) string {
	st := a.Stats()
	return fmt.Sprintf("blocks=%d recorded=%d expired=%d pruned=%d prunes=%d", st.Blocks, st.Recorded, st.Expired, st.Pruned, st.Prunes)
}

// checkApprox checks the index's invariants and that the timers hold
// exactly the pairs the index holds.
func checkApprox(a *Approx) error {
	if err := checkIndex(a.ix); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := &a.mu.t
	if err := checkTimers(t); err != nil {
		return err
	}
	if got := a.ix.Stats().Blocks[TierDevice]; got != int64(t.live) {
		return fmt.Errorf("index holds %d blocks, timers %d", got, t.live)
	}
	for w, m := range t.ranks {
		s := a.ix.shardFor(w.WorkerID)
		s.mu.Lock()
		wb := s.tree.workers[w]
		for h := range m {
			if wb == nil || !s.tree.holds(wb, w, h) {
				s.mu.Unlock()
				return fmt.Errorf("%v: timed block %d not in the index", w, h)
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// holds reports whether w holds the block with external hash e, as locate
// does but without repairing the entry.
func (t *Tree) holds(wb *workerBlocks, w WorkerKey, e uint64) bool {
	m := &wb.lookup
	i, run := m.seek(e)
	for ; ; i++ {
		id, off, ok := m.candidate(i, run)
		if !ok {
			return false
		}
		if x, ok := publishedExt(w, follow(t.placeOf(id, off))); ok && x == e {
			return true
		}
	}
}

// TestApproxMatchesModel records random prompts (drawn from a few shared
// prefixes) on random ranks at random times and checks every match against
// a naive model: a map from (rank, prefix) to its expiry. The cap is out of
// reach here; TestApproxPruneKeepsCap covers it.
func TestApproxMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			ttl := time.Duration(1+rng.IntN(5)) * time.Second
			a, _ := NewApprox(ApproxConfig{TTL: ttl})
			type key struct {
				w      WorkerKey
				prefix string
			}
			model := map[key]time.Time{} // expiry, rounded as the index rounds it
			now := epoch
			prompt := func() []uint64 {
				n := 1 + rng.IntN(8)
				p := make([]uint64, n)
				for i := range p {
					p[i] = uint64(1 + rng.IntN(3)) // few values: prompts share prefixes
				}
				return p
			}
			for step := range 400 {
				now = now.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
				// The model expires what is due, as Record and Expire do.
				for k, exp := range model {
					if !exp.After(now) {
						delete(model, k)
					}
				}
				switch rng.IntN(10) {
				case 0:
					a.Expire(now)
				case 1:
					w := WorkerKey{uint64(rng.IntN(3)), 0}
					a.Expire(now)
					a.ClearRank(w)
					for k := range model {
						if k.w == w {
							delete(model, k)
						}
					}
				default:
					w := WorkerKey{uint64(rng.IntN(3)), uint32(rng.IntN(2))}
					p := prompt()
					a.Record(w, p, now)
					exp := time.Unix(0, a.expiryOf(now.UnixNano()))
					for i := range p {
						model[key{w, fmt.Sprint(p[:i+1])}] = exp
					}
				}
				if err := checkApprox(a); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if got := a.Stats().Blocks; got != int64(len(model)) {
					t.Fatalf("step %d: %d blocks, model %d", step, got, len(model))
				}
				q := prompt()
				var r Result
				a.Match(q, &r)
				got := map[WorkerKey]uint32{}
				for _, m := range r.Matches {
					got[m.Worker] = m.Device
				}
				want := map[WorkerKey]uint32{}
				for k := range model {
					for i := len(q); i > 0; i-- {
						if k.prefix == fmt.Sprint(q[:i]) && uint32(i) > want[k.w] {
							want[k.w] = uint32(i)
						}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d: match %v: got %v, want %v", step, q, got, want)
				}
			}
		})
	}
}

// TestApproxPruneKeepsCap records past a small cap and checks the prune:
// the count never ends a Record above the cap, a prune leaves at most the
// target, every block pruned expired no later than every block kept, and
// the index agrees with the timers throughout.
func TestApproxPruneKeepsCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	a, _ := NewApprox(ApproxConfig{TTL: time.Minute, MaxBlocks: 50})
	now := epoch
	for step := range 300 {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		before := a.Stats()
		p := make([]uint64, 1+rng.IntN(12))
		for i := range p {
			p[i] = uint64(rng.IntN(4))
		}
		a.mu.Lock()
		var expiries []int64
		for _, b := range a.mu.t.buckets {
			expiries = append(expiries, b.at)
		}
		a.mu.Unlock()
		a.Record(WorkerKey{uint64(rng.IntN(4)), 0}, p, now)
		st := a.Stats()
		if st.Blocks > int64(a.maxBlocks) {
			t.Fatalf("step %d: %d blocks over the cap %d", step, st.Blocks, a.maxBlocks)
		}
		if st.Prunes > before.Prunes && st.Blocks > int64(a.target) {
			t.Fatalf("step %d: a prune left %d blocks, target %d", step, st.Blocks, a.target)
		}
		if err := checkApprox(a); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if st.Prunes > before.Prunes {
			// Kept blocks expire no earlier than the earliest bucket that
			// was pruned from.
			a.mu.Lock()
			if len(a.mu.t.buckets) > 0 && len(expiries) > 0 && a.mu.t.buckets[0].at < expiries[0] {
				t.Fatalf("step %d: a block expiring before every pruned one was kept", step)
			}
			a.mu.Unlock()
		}
	}
	if a.Stats().Prunes == 0 {
		t.Fatal("the cap was never reached: the test proves nothing")
	}
}

func TestApproxConfigValidate(t *testing.T) {
	for _, c := range []ApproxConfig{{TTL: -1}, {MaxBlocks: -1}, {Shards: -1}} {
		if _, err := NewApprox(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestApproxExpiryRounding pins the bucket rule: expiry is now+TTL rounded
// up to a multiple of 100 ms since the epoch; a zero TTL expires at now.
func TestApproxExpiryRounding(t *testing.T) {
	a, _ := NewApprox(ApproxConfig{TTL: 120 * time.Second})
	for _, c := range []struct{ now, want int64 }{
		{0, 120e9}, {1, 120e9 + 1e8}, {1e8, 120e9 + 1e8}, {1e8 + 1, 120e9 + 2e8},
	} {
		if got := a.expiryOf(c.now); got != c.want {
			t.Errorf("expiry of %d: %d, want %d", c.now, got, c.want)
		}
	}
	z, _ := NewApprox(ApproxConfig{})
	if got := z.expiryOf(12345); got != 12345 {
		t.Errorf("zero TTL: %d", got)
	}
}

// TestApproxConcurrentReaders matches while another goroutine records and
// expires: readers never take the writer's mutex (run under -race).
func TestApproxConcurrentReaders(t *testing.T) {
	a, _ := NewApprox(ApproxConfig{TTL: time.Second, MaxBlocks: 64})
	done := make(chan struct{})
	go func() {
		defer close(done)
		now := epoch
		for i := range 2000 {
			now = now.Add(10 * time.Millisecond)
			a.Record(WorkerKey{uint64(i % 5), 0}, []uint64{1, 2, uint64(i % 7), 4}, now)
			if i%10 == 0 {
				a.Expire(now)
			}
		}
	}()
	var r Result
	for {
		select {
		case <-done:
			if err := checkApprox(a); err != nil {
				t.Fatal(err)
			}
			return
		default:
			a.Match([]uint64{1, 2, 3, 4}, &r)
			for _, m := range r.Matches {
				if m.Device > 4 {
					t.Fatalf("depth %d for a 4-block query", m.Device)
				}
			}
		}
	}
}

// BenchmarkApproxRecord records 32-block prompts sharing a 16-block prefix
// on 64 ranks, one per 100 µs of injected time, with the default TTL and
// cap: the cost a booking adds in approximate mode.
func BenchmarkApproxRecord(b *testing.B) {
	a, _ := NewApprox(ApproxConfig{TTL: DefaultApproxTTL})
	prompts := make([][]uint64, 256)
	for i := range prompts {
		p := make([]uint64, 32)
		for j := range p {
			p[j] = uint64(j + 1)
			if j >= 16 {
				p[j] = uint64(i*1000 + j)
			}
		}
		prompts[i] = p
	}
	now := epoch
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(100 * time.Microsecond)
		a.Record(WorkerKey{uint64(i % 64), 0}, prompts[i%len(prompts)], now)
	}
}

// TestApproxRestore rebuilds an approximate index from another's dump: the
// same matches, every block timed (no earlier than restore time plus the
// TTL, never after its parent), and a parentless continuation refused.
func TestApproxRestore(t *testing.T) {
	src, _ := NewApprox(ApproxConfig{TTL: 10 * time.Second})
	src.Record(WorkerKey{1, 0}, []uint64{1, 2, 3}, epoch)
	src.Record(WorkerKey{1, 0}, []uint64{1, 2, 7, 8}, epoch)
	src.Record(WorkerKey{2, 1}, []uint64{1, 2}, epoch)
	dst, _ := NewApprox(ApproxConfig{TTL: 10 * time.Second})
	later := epoch.Add(time.Minute)
	for _, ev := range src.Index().Dump() {
		if !dst.Restore(&ev, later) {
			t.Fatalf("event %+v refused", ev)
		}
	}
	if err := checkApprox(dst); err != nil {
		t.Fatal(err)
	}
	for _, q := range [][]uint64{{1, 2, 3}, {1, 2, 7, 8}, {1, 2, 9}} {
		var r1, r2 Result
		src.Match(q, &r1)
		dst.Match(q, &r2)
		slices.SortFunc(r1.Matches, func(x, y Match) int { return cmpKey(x.Worker, y.Worker) })
		slices.SortFunc(r2.Matches, func(x, y Match) int { return cmpKey(x.Worker, y.Worker) })
		if fmt.Sprint(r1.Matches) != fmt.Sprint(r2.Matches) {
			t.Errorf("match %v: %v restored as %v", q, r1.Matches, r2.Matches)
		}
	}
	if n := dst.Expire(later.Add(10 * time.Second)); n != 7 || dst.Stats().Blocks != 0 {
		t.Errorf("expired %d at restore+TTL, %d left", n, dst.Stats().Blocks)
	}
	orphan := Event{Worker: WorkerKey{3, 0}, Kind: Stored, HasParent: true, ParentHash: 99, Blocks: []Block{{Hash: 5, Local: 5}}}
	if dst.Restore(&orphan, later) || dst.Restore(&Event{Worker: WorkerKey{3, 0}, Kind: Cleared}, later) {
		t.Error("an orphan store or a non-store event was restored")
	}
}
