package core

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// TestScenarios runs every testdata/*.txt script, a datadriven file: one
// command line, "----", the expected output, a blank line; lines
// starting with # are comments. -rewrite (datadriven's flag) regenerates
// the outputs. A "config" command starts a new service with the config
// changed by its arguments; every other command runs on the current one
// (started with the config so far if there is none).
//
// env.run takes the command as a line, d.FullCmd(): datadriven's reading
// of the line put back together, which is the line itself as long as its
// words are separated by single spaces and no value opens with "("
// (datadriven's list syntax). That holds for every script here, so
// commands that take free-form text (upsert's JSON, patch, advance) get
// it as written.
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, path string) {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	var e *env
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		if d.Input != "" {
			d.Fatalf(t, "a command is one line (is a ---- missing?); got more:\n%s", d.Input)
		}
		line := d.FullCmd()
		if d.Cmd == "config" {
			applyConfig(t, &cfg, strings.TrimPrefix(line, "config"))
			e = nil
			return "ok"
		}
		if e == nil {
			e = newEnv(t, cfg)
		}
		return strings.TrimRight(e.run(line), "\n")
	})
}

func applyConfig(t *testing.T, cfg *Config, args string) {
	for _, kv := range strings.Fields(args) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "kv_events":
			cfg.UseKVEvents = v == "true"
		case "queue_threshold":
			f, _ := strconv.ParseFloat(v, 64)
			cfg.Sched.QueueThreshold = &f
		case "decode_busy":
			f, _ := strconv.ParseFloat(v, 64)
			cfg.Sched.DecodeBusyThreshold = &f
		case "prefill_busy":
			f, _ := strconv.ParseFloat(v, 64)
			cfg.Sched.PrefillBusyThreshold = &f
		case "track_output":
			cfg.Sched.TrackOutputBlocks = v == "true"
		case "cache_entries":
			cfg.SelectionCacheMaxEntries, _ = strconv.Atoi(v)
		case "cache_bytes":
			n, _ := strconv.Atoi(v)
			cfg.SelectionCacheMaxBytes = int64(n)
		case "max_reservations":
			cfg.MaxReservations, _ = strconv.Atoi(v)
		case "max_reservation_bytes":
			n, _ := strconv.Atoi(v)
			cfg.MaxReservationBytes = int64(n)
		case "max_listeners":
			cfg.MaxListeners, _ = strconv.Atoi(v)
		case "approx_ttl", "predicted_ttl":
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			if k == "approx_ttl" {
				cfg.ApproxTTL = d
			} else {
				cfg.PredictedTTL = d
			}
		case "approx_max":
			cfg.ApproxMaxBlocks, _ = strconv.Atoi(v)
		case "networks":
			cfg.KVEndpointNetworks = []netip.Prefix{}
			for _, n := range strings.Split(v, ",") {
				cfg.KVEndpointNetworks = append(cfg.KVEndpointNetworks, netip.MustParsePrefix(n))
			}
		case "reset":
			*cfg = DefaultConfig()
			cfg.UseKVEvents = false
		default:
			if !applyDisaggConfig(cfg, k, v) && !applySessionConfig(cfg, k, v) {
				t.Fatalf("unknown config %q", k)
			}
		}
	}
}

// args parses "k=v k=v" pairs.
func args(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func u32s(s string) []uint32 {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, _ := strconv.ParseUint(f, 10, 32)
		out = append(out, uint32(n))
	}
	return out
}

func u64s(s string) []uint64 {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		out = append(out, uint64(n))
	}
	return out
}

func prompt(a map[string]string) Prompt {
	var p Prompt
	if v, ok := a["tokens"]; ok {
		p.TokenIDs, p.HasTokenIDs = u32s(v), true
	}
	if v, ok := a["block_hashes"]; ok {
		p.BlockHashes, p.HasBlockHashes = u64s(v), true
	}
	if v, ok := a["seq"]; ok {
		p.SequenceHashes, p.HasSequenceHashes = u64s(v), true
	}
	if v, ok := a["isl"]; ok {
		p.ISLTokens, _ = strconv.ParseUint(v, 10, 64)
		p.HasISLTokens = true
	}
	p.LoraName, p.CacheSalt = a["lora"], a["salt"]
	return p
}

// activeRequests sums active_requests over every schedulable worker rank.
func activeRequests(s *Service) int64 {
	n := int64(0)
	for _, pl := range s.Loads("", "") {
		for _, l := range pl.Loads {
			n += l.ActiveRequests
		}
	}
	return n
}

// errText names the error's class (the host maps classes to statuses) and
// its message.
func errText(err error) string {
	return fmt.Sprintf("error %s: %s", strings.TrimPrefix(ClassOf(err).Error(), "core: "), err)
}

func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "marshal: " + err.Error()
	}
	return string(b)
}

func fmtSelection(o *Selection) string {
	var b strings.Builder
	fmt.Fprintf(&b, "worker=%d/%d endpoint=%s bs=%d", o.WorkerID, o.DPRank, o.Endpoint, o.BlockSize)
	if o.HasSelectionID {
		fmt.Fprintf(&b, " id=%s", o.SelectionID)
	}
	fmt.Fprintf(&b, " overlap={longest=%d gpu=%d cpu=%d disk=%d dp=%v}", o.Overlap.LongestMatched, o.Overlap.GPU, o.Overlap.CPU, o.Overlap.Disk, o.Overlap.DP)
	fmt.Fprintf(&b, " eff=%d pdb=%d", o.EffectivePrefillTokens, o.PotentialDecodeBlocks)
	if o.DecodeBusyKnown {
		fmt.Fprintf(&b, " decode_busy=%t", o.DecodeBusy)
	}
	if o.Booked {
		fmt.Fprintf(&b, " booked seq=%v isl=%d track=%t", o.SequenceHashes, o.ISLTokens, o.TrackPrefillTokens)
	}
	if o.HasWorkerLoad {
		fmt.Fprintf(&b, " worker_load=%+v", o.WorkerLoad)
	}
	if o.HasKVHint {
		fmt.Fprintf(&b, " kv_hint={source=%s hashes=%v}", o.KVHint.SourceControlEndpoint, o.KVHint.BlockHashes)
	}
	return b.String()
}

func (e *env) run(line string) string {
	cmd, rest, _ := strings.Cut(line, " ")
	a := args(rest)
	s := e.s
	switch cmd {
	case "upsert":
		var spec WorkerSpec
		if err := json.Unmarshal([]byte(rest), &spec); err != nil {
			e.t.Fatalf("%s: %v", line, err)
		}
		r, err := s.UpsertWorker(&spec)
		if err != nil {
			return errText(err)
		}
		return jsonLine(r)
	case "patch":
		idS, body, _ := strings.Cut(rest, " ")
		id, _ := strconv.ParseUint(idS, 10, 64)
		var p WorkerPatch
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			e.t.Fatalf("%s: %v", line, err)
		}
		r, err := s.PatchWorker(id, &p)
		if err != nil {
			return errText(err)
		}
		return jsonLine(r)
	case "delete":
		id, _ := strconv.ParseUint(rest, 10, 64)
		r, err := s.DeleteWorker(id)
		if err != nil {
			return errText(err)
		}
		return jsonLine(r)
	case "list":
		var b strings.Builder
		for _, r := range s.ListWorkers(a["model"], a["group"]) {
			fmt.Fprintf(&b, "%s/%s/%d %s %v\n", r.ModelName, r.RoutingGroup, r.WorkerID, r.Lifecycle, r.NotSchedulableReasons)
		}
		return b.String()
	case "ready":
		r := s.Ready()
		return fmt.Sprintf("ready=%t schedulable=%d records=%d", r.Ready, r.SchedulableWorkers, len(r.Workers))
	case "select", "select_and_reserve":
		req := SelectRequest{ModelName: a["model"], RoutingGroup: a["group"], Prompt: prompt(a)}
		if v, ok := a["id"]; ok {
			req.SelectionID, req.HasSelectionID = v, true
		}
		if v, ok := a["pin"]; ok {
			w, r, _ := strings.Cut(v, "/")
			id, _ := strconv.ParseUint(w, 10, 64)
			rk, _ := strconv.ParseUint(r, 10, 32)
			req.PinnedWorker = &radix.WorkerKey{WorkerID: id, DPRank: uint32(rk)}
		}
		if v, ok := a["expected"]; ok {
			n, _ := strconv.ParseUint(v, 10, 32)
			req.ExpectedOutputTokens, req.HasExpectedOutputTokens = uint32(n), true
		}
		if v, ok := a["allowed"]; ok {
			req.AllowedWorkerIDs, req.HasAllowedWorkerIDs = u64s(v), true
		}
		if _, ok := a["no_track"]; ok {
			f := false
			req.Override = &sched.Override{TrackPrefillTokens: &f}
		}
		req.Advisory = a["advisory"] == "true"
		sessionArgs(&req, a)
		var out Selection
		var err error
		if cmd == "select" {
			err = s.Select(&req, &out)
		} else {
			err = s.SelectAndReserve(&req, &out)
		}
		if err != nil {
			return errText(err)
		}
		if _, ok := a["id"]; !ok && out.Booked {
			out.SelectionID = "<generated " + strconv.Itoa(len(out.SelectionID)) + " chars>"
		}
		return fmtSelection(&out)
	case "reserve":
		req := ReservationRequest{ModelName: a["model"], RoutingGroup: a["group"], SelectionID: a["id"], Prompt: prompt(a)}
		if v, ok := a["worker"]; ok {
			w, r, _ := strings.Cut(v, "/")
			req.WorkerID, _ = strconv.ParseUint(w, 10, 64)
			rk, _ := strconv.ParseUint(r, 10, 32)
			req.DPRank, req.HasWorkerID = uint32(rk), true
		}
		if v, ok := a["eff"]; ok {
			req.EffectivePrefillTokens, _ = strconv.ParseUint(v, 10, 64)
			req.HasEffectivePrefillTokens = true
		}
		if v, ok := a["track"]; ok {
			b := v == "true"
			req.TrackPrefillTokens = &b
		}
		r, err := s.Reserve(&req)
		if err != nil {
			return errText(err)
		}
		return jsonLine(r)
	case "prefill_complete":
		return okOr(s.PrefillComplete(rest))
	case "output_block":
		id, f, has := strings.Cut(rest, " ")
		var fp *float64
		if has {
			v, _ := strconv.ParseFloat(f, 64)
			fp = &v
		}
		return okOr(s.OutputBlock(id, fp))
	case "free":
		return okOr(s.Free(rest))
	case "loads":
		var b strings.Builder
		for _, pl := range s.Loads(a["model"], a["group"]) {
			fmt.Fprintf(&b, "%s/%s:", pl.ModelName, pl.RoutingGroup)
			for _, l := range pl.Loads {
				fmt.Fprintf(&b, " %d/%d{prefill=%d blocks=%d reqs=%d}", l.WorkerID, l.DPRank, l.PotentialPrefillTokens, l.PotentialDecodeBlocks, l.ActiveRequests)
			}
			b.WriteString("\n")
		}
		return b.String()
	case "potential_loads":
		q := QueryRequest{ModelName: a["model"], RoutingGroup: a["group"], Prompt: prompt(a)}
		ls, err := s.PotentialLoads(&q)
		if err != nil {
			return errText(err)
		}
		return jsonLine(ls)
	case "overlap_scores":
		q := QueryRequest{ModelName: a["model"], RoutingGroup: a["group"], Prompt: prompt(a)}
		os, err := s.OverlapScores(&q)
		if err != nil {
			return errText(err)
		}
		return jsonLine(os)
	case "store":
		// store model=m group=g worker=1/0 tokens=...: the worker reports
		// the token blocks as stored (external hash = local hash + 1000).
		w, r, _ := strings.Cut(a["worker"], "/")
		id, _ := strconv.ParseUint(w, 10, 64)
		rk, _ := strconv.ParseUint(r, 10, 32)
		bs, _ := strconv.Atoi(a["bs"])
		local := radix.LocalHashes(nil, u32s(a["tokens"]), bs, radix.HashSeed("", ""))
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: id, DPRank: uint32(rk)}, Kind: radix.Stored}
		if t, ok := radix.ParseTier(a["tier"]); ok {
			ev.Tier = t
		}
		for _, l := range local {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: l + 1000, Local: l})
		}
		sink := s.EventSink(orDefault(a["model"]), orDefault(a["group"]))
		sink.ApplyBatch([]radix.Event{ev})
		return fmt.Sprintf("stored %d blocks", len(local))
	case "dump":
		var b strings.Builder
		for _, d := range s.Dump() {
			fmt.Fprintf(&b, "%s bs=%d events=%d\n", d.Key, d.BlockSize, len(d.Events))
		}
		return b.String()
	case "advance":
		d, err := time.ParseDuration(rest)
		if err != nil {
			e.t.Fatal(err)
		}
		e.now = e.now.Add(d)
		return "now +" + rest
	case "sweep":
		return fmt.Sprintf("expired %d", s.Sweep(e.now))
	case "expire_index":
		return fmt.Sprintf("expired %d blocks", s.ExpireIndex(e.now))
	case "index":
		st := s.Stats()
		f := func(a radix.ApproxStats) string {
			return fmt.Sprintf("blocks=%d/%d recorded=%d expired=%d pruned=%d", a.Blocks, a.MaxBlocks, a.Recorded, a.Expired, a.Pruned)
		}
		return fmt.Sprintf("device=%d approx{%s} predicted{%s}", st.IndexBlocks[radix.TierDevice], f(st.Approx), f(st.Predicted))
	case "stats":
		st := s.Stats()
		// active is what the workers' load counters hold: it must agree
		// with the ledger's reservations.
		return fmt.Sprintf("reservations=%d pending=%d/%dB active=%d schedulable=%d book_ok=%d conflict=%d failed=%d replay_hit=%d miss=%d expired=%d",
			st.Reservations, st.PendingEntries, st.PendingBytes, activeRequests(s), st.SchedulableWorkers, st.BookOK, st.BookConflict, st.BookFailed, st.ReplayHit, st.ReplayMiss, st.Expired)
	case "close":
		s.Close()
		return "closed"
	case "ingress":
		return e.ingress.take()
	case "replica":
		return e.replica.take()
	case "limits":
		st := s.Stats()
		return fmt.Sprintf("reservations=%d/%d bytes=%d/%d listeners=%d/%d refused=%d", st.Reservations, st.MaxReservations, st.ReservationBytes, st.MaxReservationBytes, st.Listeners, st.MaxListeners, st.BookRefused)
	case "peer":
		// peer <add|prefill_completed|free> id=.. [model= group= bs= worker=w/r seq=.. eff=.. track= expected= origin=]
		kind, argv, _ := strings.Cut(rest, " ")
		a := args(argv)
		ev := ReplicaEvent{ModelName: orDefault(a["model"]), RoutingGroup: orDefault(a["group"]), RequestID: a["id"]}
		ev.Kind = map[string]ReplicaEventKind{"add": ReplicaAdd, "prefill_completed": ReplicaPrefillCompleted, "free": ReplicaFree}[kind]
		bs, _ := strconv.ParseUint(cmp.Or(a["bs"], "4"), 10, 32)
		ev.BlockSize = uint32(bs)
		if v, ok := a["worker"]; ok {
			w, r, _ := strings.Cut(v, "/")
			ev.Worker.WorkerID, _ = strconv.ParseUint(w, 10, 64)
			rk, _ := strconv.ParseUint(r, 10, 32)
			ev.Worker.DPRank = uint32(rk)
		}
		ev.SequenceHashes = u64s(a["seq"])
		ev.EffectivePrefillTokens, _ = strconv.ParseInt(a["eff"], 10, 64)
		ev.TrackPrefillTokens = a["track"] != "false"
		if v, ok := a["expected"]; ok {
			n, _ := strconv.ParseUint(v, 10, 32)
			e := uint32(n)
			ev.ExpectedOutputTokens = &e
		}
		o, _ := strconv.ParseUint(cmp.Or(a["origin"], "7"), 10, 64)
		ev.Origin = Origin(o)
		before := s.Stats()
		s.ApplyReplica([]ReplicaEvent{ev})
		after := s.Stats()
		if after.ReplicaApplied > before.ReplicaApplied {
			return "applied"
		}
		for d := range after.ReplicaDropped {
			if after.ReplicaDropped[d] > before.ReplicaDropped[d] {
				return "dropped " + ReplicaDrop(d).String()
			}
		}
		return "?"
	case "snapshot":
		evs := s.AppendLocalBookings(nil)
		slices.SortFunc(evs, func(a, b ReplicaEvent) int { return cmp.Compare(a.RequestID, b.RequestID) })
		rec := &recReplica{}
		for i := range evs {
			rec.Publish(&evs[i])
		}
		return rec.take()
	case "listeners":
		var b strings.Builder
		for _, r := range s.ListWorkers("", "") {
			fmt.Fprintf(&b, "%d: %v\n", r.WorkerID, r.Listeners)
		}
		return b.String()
	}
	if out, ok := e.runDisagg(cmd, rest, a); ok {
		return out
	}
	if out, ok := e.runSession(cmd, rest, a); ok {
		return out
	}
	e.t.Fatalf("unknown command %q", line)
	return ""
}

func orDefault(s string) string {
	if s == "" {
		return DefaultPartition
	}
	return s
}

func okOr(err error) string {
	if err != nil {
		return errText(err)
	}
	return "ok"
}
