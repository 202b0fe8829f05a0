package sched

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/kvselect/kvselect/radix"
)

// TestQueueScenarios runs testdata/queue_*.txt: datadriven scripts over
// one PolicyQueue whose payloads are names. Commands:
//
//	profile synthetic policy=fcfs|lcfs|wspt threshold=F
//	profile classes NAME:quantum:policy[:limit_req[:limit_isl[:limit_cached]]] ...
//	enqueue NAME class=C isl=N cached=N at=SECS jump=F strict=N pin=W/R workers=N
//	pop [blocked=NAME,NAME] [busy=W/R,...]   (the listed entries or lanes are not dispatchable)
//	drain                                    pop until nothing pops
//	remove NAME
//	stats
//
// -rewrite (datadriven's flag) regenerates the outputs.
func TestQueueScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/queue_*.txt")
	if len(files) == 0 {
		t.Fatal("no queue scenarios")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			e := &qenv{}
			datadriven.RunTest(t, f, func(t *testing.T, d *datadriven.TestData) string {
				return strings.TrimRight(e.run(t, d), "\n")
			})
		})
	}
}

type qenv struct {
	prof    *PolicyProfile
	q       *PolicyQueue[string]
	entries map[string]*QueueEntry[string]
}

// args returns d's bare words, in order, and its key=value arguments.
func args(d *datadriven.TestData) ([]string, map[string]string) {
	var words []string
	kv := map[string]string{}
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			words = append(words, a.Key)
		} else {
			kv[a.Key] = strings.Join(a.Vals, ",")
		}
	}
	return words, kv
}

func i64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func (e *qenv) run(t *testing.T, d *datadriven.TestData) string {
	f, a := args(d)
	switch d.Cmd {
	case "profile":
		if f[0] == "synthetic" {
			pol, err := ParseQueuePolicy(a["policy"])
			if err != nil {
				return err.Error()
			}
			th, _ := strconv.ParseFloat(a["threshold"], 64)
			e.prof = SyntheticProfile(&th, pol)
		} else {
			e.prof = &PolicyProfile{synthetic: true}
			for _, spec := range f[1:] {
				p := strings.Split(spec, ":")
				pol, err := ParseQueuePolicy(p[2])
				if err != nil {
					return err.Error()
				}
				c := PolicyClass{Name: p[0], Quantum: i64(p[1]), Policy: pol}
				lim := []**int64{&c.RequestLimitPerWorker, &c.RawISLLimitPerWorker, &c.CachedTokLimitPerWorker}
				for k, v := range p[3:] {
					if v != "-" {
						n := i64(v)
						*lim[k] = &n
					}
				}
				e.prof.Classes = append(e.prof.Classes, c)
			}
		}
		e.q = NewPolicyQueue[string](e.prof)
		e.entries = map[string]*QueueEntry[string]{}
		return fmt.Sprintf("%d classes", len(e.prof.Classes))
	case "enqueue":
		name := f[0]
		at, _ := strconv.ParseFloat(a["at"], 64)
		jump, _ := strconv.ParseFloat(a["jump"], 64)
		var pin *radix.WorkerKey
		if v, ok := a["pin"]; ok {
			w, r, _ := strings.Cut(v, "/")
			pin = &radix.WorkerKey{WorkerID: uint64(i64(w)), DPRank: uint32(i64(r))}
		}
		workers := int(i64(a["workers"]))
		if workers == 0 {
			workers = 1
		}
		en, err := e.q.Enqueue(int(i64(a["class"])), workers, NewQueueCost(i64(a["isl"]), i64(a["cached"])), at, jump, uint32(i64(a["strict"])), pin, name)
		if err != nil {
			return "rejected: " + err.Error()
		}
		e.entries[name] = en
		return fmt.Sprintf("queued score=%.4g", en.score)
	case "pop", "drain":
		blocked := map[string]bool{}
		for _, n := range strings.Split(a["blocked"], ",") {
			blocked[n] = true
		}
		busy := map[string]bool{}
		for _, n := range strings.Split(a["busy"], ",") {
			busy[n] = true
		}
		ok := func(en *QueueEntry[string]) bool {
			if w, pinned := en.Pinned(); pinned && busy[w.String()] {
				return false
			}
			return !blocked[en.Payload]
		}
		var names []string
		for {
			en := e.q.Pop(ok)
			if en == nil {
				break
			}
			names = append(names, en.Payload)
			if d.Cmd == "pop" {
				break
			}
		}
		if len(names) == 0 {
			return "(none)"
		}
		return strings.Join(names, " ")
	case "remove":
		en := e.entries[f[0]]
		if en == nil {
			return "unknown"
		}
		return fmt.Sprintf("removed=%t", e.q.Remove(en))
	case "stats":
		var b strings.Builder
		fmt.Fprintf(&b, "len=%d", e.q.Len())
		for c := range e.prof.Classes {
			st := e.q.Stats(c)
			fmt.Fprintf(&b, " %s={reqs=%d isl=%d cached=%d deficit=%d}", e.prof.Classes[c].Name, st.Requests, st.RawISLTokens, st.CachedTokens, e.q.classes[c].deficit)
		}
		return b.String()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}
