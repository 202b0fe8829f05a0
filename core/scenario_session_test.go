package core

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scenario commands of session affinity and kv hints
// (testdata/affinity_*.txt, testdata/hints.txt):
//
//	config affinity_ttl=10s affinity_mode=soft affinity_entries=N
//	select ... session=S ctx_session=S target=W/R|W/-
//	affinity [model= group=]        the table, sorted by session
//	reap                            ReapAffinity at the scenario's clock
//	peer_affinity session=S worker=W/R|W/- seq=N writer=N [model= group=]
//	affinity_events                 the bindings published since last asked
//	hold NAME session=S [target=..] table-level: try_acquire
//	commit NAME worker=W/R [lease=L]    commit hold NAME
//	drop NAME                       cancel an uncommitted hold
//	join session=S worker=W/R lease=L
//	release L                       release lease L (Lease.Release)
//	logs                            the service's warnings since last asked

func applySessionConfig(cfg *Config, k, v string) bool {
	switch k {
	case "affinity_ttl":
		cfg.SessionAffinity.TTL, _ = time.ParseDuration(v)
	case "affinity_mode":
		cfg.SessionAffinity.Mode, _ = ParseAffinityMode(v)
	case "affinity_entries":
		cfg.MaxAffinityEntries, _ = strconv.Atoi(v)
	default:
		return false
	}
	return true
}

func parseTarget(v string) AffinityTarget {
	w, r, _ := strings.Cut(v, "/")
	t := AffinityTarget{}
	t.WorkerID, _ = strconv.ParseUint(w, 10, 64)
	if r != "-" {
		n, _ := strconv.ParseUint(r, 10, 32)
		t.DPRank, t.HasDPRank = uint32(n), true
	}
	return t
}

// sessionArgs applies a select command's session arguments.
func sessionArgs(req *SelectRequest, a map[string]string) {
	if v, ok := a["session"]; ok {
		req.SessionID, req.HasSessionID = v, true
	}
	if v, ok := a["ctx_session"]; ok {
		req.SessionContext = SessionContext{SessionID: v, ParentSessionID: "root", HasParent: true, InputTrigger: "tool_result",
			AgentHeaders: []AgentHeader{{Name: "x-agent", Values: []string{"sub"}}}}
		req.HasSessionContext = true
	}
	if v, ok := a["target"]; ok {
		t := parseTarget(v)
		req.AffinityTarget = &t
	}
	if v, ok := a["class"]; ok {
		req.PolicyClass = v
	}
}

// recAffinity records the published bindings and the service's warnings.
type recAffinity struct {
	mu   sync.Mutex
	log  []string
	logs []string
}

func (r *recAffinity) PublishAffinity(ev *AffinityEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rank := "nil"
	if ev.HasDPRank {
		rank = strconv.FormatUint(uint64(ev.DPRank), 10)
	}
	r.log = append(r.log, fmt.Sprintf("%s:%s session=%s worker=%d dp_rank=%s seq=+%d writer=%d", ev.ModelName, ev.RoutingGroup, ev.SessionID, ev.WorkerID, rank, ev.Sequence-1_700_000_000_000_000_000, ev.WriterID))
}

func (r *recAffinity) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func take(mu *sync.Mutex, log *[]string) string {
	mu.Lock()
	defer mu.Unlock()
	out := strings.Join(*log, "\n")
	*log = nil
	if out == "" {
		return "(none)"
	}
	return out
}

// dumpAffinity prints a partition's table: state, target, version (the
// sequence relative to the table's creation instant), leases and the idle
// time left.
func (e *env) dumpAffinity(model, group string) string {
	p := e.s.lookup(orDefault(model), orDefault(group))
	if p == nil || p.affinity == nil {
		return "no table"
	}
	t := p.affinity
	var lines []string
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for id, en := range sh.m {
			if !en.bound {
				lines = append(lines, id+": initializing")
				continue
			}
			l := fmt.Sprintf("%s: bound %s v=(+%d,%d) leases=%d", id, en.target, en.version.seq-uint64(e.epoch()), en.version.writer, en.leases)
			if en.leases == 0 {
				l += fmt.Sprintf(" idle_left=%v", time.Duration(en.deadline-e.now.UnixNano()))
			}
			lines = append(lines, l)
		}
		sh.mu.Unlock()
	}
	slices.Sort(lines)
	lines = append(lines, fmt.Sprintf("entries=%d", t.count.Load()))
	return strings.Join(lines, "\n")
}

// epoch is the scenario clock's start: sequences count from it.
func (e *env) epoch() int64 { return 1_700_000_000_000_000_000 }

func (e *env) runSession(cmd, rest string, a map[string]string) (string, bool) {
	s := e.s
	if e.holds == nil {
		e.holds, e.leases = map[string]*affinityHold{}, map[string]*affinityLease{}
	}
	table := func() *affinityTable {
		p := s.lookup(orDefault(a["model"]), orDefault(a["group"]))
		if p == nil || p.affinity == nil {
			e.t.Fatalf("%s %s: no table", cmd, rest)
		}
		return p.affinity
	}
	switch cmd {
	case "affinity":
		return e.dumpAffinity(a["model"], a["group"]), true
	case "reap":
		return fmt.Sprintf("reaped %d", s.ReapAffinity(e.now)), true
	case "affinity_events":
		return take(&e.affinity.mu, &e.affinity.log), true
	case "logs":
		return take(&e.affinity.mu, &e.affinity.logs), true
	case "peer_affinity":
		t := parseTarget(a["worker"])
		seq, _ := strconv.ParseUint(a["seq"], 10, 64)
		w, _ := strconv.ParseUint(cmp.Or(a["writer"], "9"), 10, 64)
		ev := AffinityEvent{ModelName: orDefault(a["model"]), RoutingGroup: orDefault(a["group"]), SessionID: a["session"],
			WorkerID: t.WorkerID, DPRank: t.DPRank, HasDPRank: t.HasDPRank, Sequence: uint64(e.epoch()) + seq, WriterID: w}
		before := s.AffinityStats()
		s.ApplyAffinity([]AffinityEvent{ev})
		after := s.AffinityStats()
		for k := range after.Applied {
			if after.Applied[k] > before.Applied[k] {
				return AffinityApply(k).String(), true
			}
		}
		return "?", true
	case "hold":
		name, _, _ := strings.Cut(rest, " ")
		var req *AffinityTarget
		if v, ok := a["target"]; ok {
			t := parseTarget(v)
			req = &t
		}
		h, wait, err := table().tryAcquire(a["session"], req)
		switch {
		case err != nil:
			return errText(err), true
		case wait != nil:
			select {
			case <-wait:
				return "wait (already woken)", true
			default:
				return "wait", true
			}
		}
		e.holds[name] = h
		if h.init {
			return "initialize", true
		}
		e.leases[name] = h.lease
		return "bound " + h.target.String(), true
	case "commit":
		name, _, _ := strings.Cut(rest, " ")
		h := e.holds[name]
		l, err := table().commit(h, parseTarget(a["worker"]))
		if err != nil {
			return errText(err), true
		}
		e.leases[cmp.Or(a["lease"], name)] = l
		return "lease", true
	case "drop":
		e.holds[rest].drop()
		return "dropped", true
	case "join":
		l := table().joinInitializing(a["session"], parseTarget(a["worker"]))
		if l == nil {
			return "not initializing", true
		}
		e.leases[a["lease"]] = l
		return "joined", true
	case "release":
		e.leases[rest].Release()
		return "released", true
	case "affinity_stats":
		st := s.AffinityStats()
		return fmt.Sprintf("entries=%d limit=%d binds=%d rebinds=%d invalidated=%d rejected=%d full_table=%d reaped=%d published=%d",
			st.Entries, st.EntryLimit, st.Binds, st.Rebinds, st.Invalidated, st.Rejected, st.FullTable, st.Reaped, st.Published), true
	}
	return "", false
}
