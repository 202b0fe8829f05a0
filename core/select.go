package core

import (
	"cmp"
	"context"
	"crypto/rand"
	"slices"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// scratch holds one selection's working buffers; pooled in Service.scratch.
type scratch struct {
	local, seq []uint64
	res        radix.Result
	side       radix.Result // the side index's matches, merged into res
	cands      []sched.Candidate
	costs      []float64
	part       []float64 // a policy's second and later scorers
	loads      []sched.PotentialLoad
	mmBuf      []byte
	// kh derives keyed tracking seeds (nil without keyed tracking);
	// track holds keyed tracking hashes.
	kh    *keyedHasher
	track []uint64
	// ctx, params and req are the selection policy's sched.SelectionContext and
	// what it points to: kept here, in the pooled scratch, so that
	// passing them to a policy's interface methods allocates nothing.
	ctx    sched.SelectionContext
	params sched.Params
	req    sched.Request
	// lora holds a LoRA request's narrowed allow-set (lora.go).
	lora []uint64
}

func (s *Service) getScratch() *scratch   { return s.scratch.Get().(*scratch) }
func (s *Service) putScratch(sc *scratch) { s.scratch.Put(sc) }

// readyPartition returns the partition and its snapshot when it has a
// schedulable worker, or the reference's not-ready error.
func (s *Service) readyPartition(model, group string) (*partition, *snapshot, error) {
	if s.closed.Load() {
		return nil, nil, errShuttingDown
	}
	p := s.lookup(model, group)
	var sn *snapshot
	if p != nil {
		sn = p.snap.Load()
	}
	if sn == nil || len(sn.workers) == 0 {
		if s.schedulableWorkers() == 0 {
			return nil, nil, errNoWorkers
		}
		return nil, nil, errorf(ErrNotReady, "no schedulable workers for model=%s routing_group=%s", model, group)
	}
	return p, sn, nil
}

// Hash-path validation errors (bad requests), allocation-free.
var (
	errNeedBlockHashes = &Error{Class: ErrBadRequest, Msg: "block_hashes is required without token_ids"}
	errNeedSeqHashes   = &Error{Class: ErrBadRequest, Msg: "sequence_hashes is required without token_ids"}
	errNeedISL         = &Error{Class: ErrBadRequest, Msg: "isl_tokens is required without token_ids"}
	errISLZero         = &Error{Class: ErrBadRequest, Msg: "isl_tokens must be greater than 0"}
)

// normalize turns a prompt into local block hashes (for the index), tracking
// hashes and the ISL. With tokens it hashes them with the partition's block
// size and eagle mode (or the request's is_eagle), LoRA name, cache salt and
// per-block multimodal hashes, and derives the tracking hashes publicly or
// keyed (tracking.go); the hash trio is trusted as-is. local and
// seq alias sc or the prompt. needLocal is false for reservations, which
// need only sequence_hashes and isl_tokens.
func normalize(pr *Prompt, p *partition, sn *snapshot, sc *scratch, needLocal bool) (local, seq []uint64, isl int64, err error) {
	toks, has, mm := pr.TokenIDs, pr.HasTokenIDs, pr.BlockMMHashes
	if len(pr.RoutingTokenIDs) > 0 {
		toks, has, mm = pr.RoutingTokenIDs, true, pr.RoutingBlockMMHashes
	}
	if has {
		if len(toks) == 0 {
			return nil, nil, 0, errISLZero
		}
		eagle := sn.isEagle
		if pr.HasIsEagle {
			eagle = pr.IsEagle
		}
		seed := radix.HashSeed(pr.LoraName, pr.CacheSalt)
		sc.local = localHashes(sc.local[:0], toks, int(sn.blockSize), seed, eagle, mm, &sc.mmBuf)
		if sc.kh != nil {
			// Keyed tracking: the index is still matched with the public
			// local hashes.
			ts := trackingScope{model: p.model, group: p.group, blockSize: sn.blockSize, salt: pr.CacheSalt, lora: pr.LoraName, eagle: eagle}
			sc.track = sc.kh.keyedSequence(sc.track[:0], &ts, toks, mm, &sc.mmBuf)
			return sc.local, sc.track, int64(len(toks)), nil
		}
		sc.seq = radix.SequenceHashes(sc.seq[:0], sc.local)
		return sc.local, sc.seq, int64(len(toks)), nil
	}
	switch {
	case needLocal && !pr.HasBlockHashes:
		return nil, nil, 0, errNeedBlockHashes
	case !pr.HasSequenceHashes:
		return nil, nil, 0, errNeedSeqHashes
	case !pr.HasISLTokens:
		return nil, nil, 0, errNeedISL
	case pr.ISLTokens == 0:
		return nil, nil, 0, errISLZero
	case pr.HasBlockHashes && len(pr.BlockHashes) != len(pr.SequenceHashes):
		return nil, nil, 0, errorf(ErrBadRequest, "block_hashes length %d must match sequence_hashes length %d", len(pr.BlockHashes), len(pr.SequenceHashes))
	}
	return pr.BlockHashes, pr.SequenceHashes, int64(min(pr.ISLTokens, 1<<62)), nil
}

// fillOverlap copies each match's tier depths onto its candidate. cands are
// sorted by (worker, rank) (AppendCandidates walks the sorted snapshot), so
// each match is one binary search.
func fillOverlap(cands []sched.Candidate, ms []radix.Match) {
	for i := range ms {
		m := &ms[i]
		j, ok := slices.BinarySearchFunc(cands, m.Worker, func(c sched.Candidate, k radix.WorkerKey) int {
			return cmp.Or(cmp.Compare(c.Worker.WorkerID, k.WorkerID), cmp.Compare(c.Worker.DPRank, k.DPRank))
		})
		if !ok {
			continue
		}
		c := &cands[j]
		c.DeviceBlocks, c.HostBlocks, c.DiskBlocks = int64(m.Device), int64(m.Host), int64(m.Disk+m.External)
	}
}

// scored is a request prepared for scoring: the partition, the resolved
// weights, the normalized prompt and every eligible candidate with its
// overlap and loads filled (in sc.cands, sc.res).
type scored struct {
	p      *partition
	sn     *snapshot // the snapshot the candidates come from
	params sched.Params
	local  []uint64 // local block hashes (alias sc or the prompt)
	seq    []uint64 // tracking hashes (alias sc or the prompt)
	req    sched.Request
}

// prepare runs the steps every selection-shaped request shares (select,
// select_and_reserve, potential_loads, overlap_scores), steps 1 to 3 of
// sched's host contract: resolve the weights, normalize the prompt, list
// the eligible candidates, match the prompt in the index and fill overlap
// and loads. The caller owns sc and checked readiness (p, sn).
func (s *Service) prepare(p *partition, sn *snapshot, pr *Prompt, ov *sched.Override, cons *sched.Constraints, sc *scratch) (scored, error) {
	params, err := s.cfg.Sched.Resolve(ov)
	if err != nil {
		return scored{}, fromSched(err)
	}
	local, seq, isl, err := normalize(pr, p, sn, sc, true)
	if err != nil {
		return scored{}, err
	}
	cands, err := sched.AppendCandidates(sc.cands[:0], sn.workers, cons)
	sc.cands = cands
	if err != nil {
		return scored{}, fromSched(err)
	}
	if err := s.match(p, local, sc); err != nil {
		return scored{}, err
	}
	fillOverlap(cands, sc.res.Matches)
	for i := range cands {
		v, wl := sn.load(cands[i].Worker)
		if v != nil {
			cands[i].TotalKVBlocks, cands[i].MaxBatchedTokens = v.totalKVBlocks, v.maxBatched
		}
		if wl != nil {
			wl.Fill(&cands[i], seq, params.AssumeKVReuse)
		}
	}
	return scored{p: p, sn: sn, params: params, local: local, seq: seq, req: sched.Request{ISLTokens: isl, BlockSize: int64(sn.blockSize)}}, nil
}

// Select picks a worker without booking (POST /select). With a selection
// id it caches the booking inputs for a later POST /reservations replay.
func (s *Service) Select(req *SelectRequest, out *Selection) error {
	return s.SelectContext(context.Background(), req, out)
}

// SelectContext is Select whose waits (in the router queue, for a
// session's initialization) end when ctx does.
func (s *Service) SelectContext(ctx context.Context, req *SelectRequest, out *Selection) error {
	_, err := s.selectWorker(ctx, req, out, false, nil)
	s.countSelect(err)
	return err
}

// SelectAndReserve picks a worker and books it atomically under the
// request's selection id, generating a UUID v4 when absent (POST
// /select_and_reserve). A conflict when the id is already reserved or being
// reserved, whatever the worker.
func (s *Service) SelectAndReserve(req *SelectRequest, out *Selection) error {
	return s.SelectAndReserveContext(context.Background(), req, out)
}

// SelectAndReserveContext is SelectAndReserve whose waits end when ctx
// does (the caller went away); nothing is booked then.
func (s *Service) SelectAndReserveContext(ctx context.Context, req *SelectRequest, out *Selection) error {
	_, err := s.selectWorker(ctx, req, out, true, nil)
	s.countSelect(err)
	return err
}

// reserveWithLease is SelectAndReserve whose record carries lease from its
// claim on; it returns the record it booked.
func (s *Service) reserveWithLease(req *SelectRequest, out *Selection, lease Lease) (*reservation, error) {
	r, err := s.selectWorker(context.Background(), req, out, true, lease)
	s.countSelect(err)
	return r, err
}

func (s *Service) countSelect(err error) {
	if err == nil {
		s.stats.selectOK.Add(1)
	} else {
		s.stats.selectFailed.Add(1)
	}
}

// selectWorker selects and, with book, books under lease (nil: none) and
// returns the booked record. Its steps: readiness; the session (a booking
// holds it, a select queries it); candidates, overlap and loads
// (prepare); the router queue; the affinity target's restriction; score
// and pick; then either the pending-selection cache (select) or the
// booking, the session commit and the kv hint (select_and_reserve).
func (s *Service) selectWorker(ctx context.Context, req *SelectRequest, out *Selection, book bool, lease Lease) (*reservation, error) {
	out.Reset()
	model := cmp.Or(req.ModelName, DefaultPartition)
	group := cmp.Or(req.RoutingGroup, DefaultPartition)
	p, sn, err := s.readyPartition(model, group)
	if err != nil {
		return nil, err
	}
	if book && req.HasSelectionID {
		// Dynamo claims the id before scheduling: a claimed id is a conflict
		// whatever else is wrong. The claim itself comes after the pick
		// (book); this check answers the common case early.
		if _, claimed := s.ledger.m.Load(req.SelectionID); claimed {
			s.stats.bookConflict.Add(1)
			return nil, errorf(ErrConflict, "selection %s is already reserved or being reserved", req.SelectionID)
		}
	}
	cons := sched.Constraints{RequiredTaints: req.RequiredTaints, PreferredTaints: req.PreferredTaints, Pinned: req.PinnedWorker}
	if req.HasAllowedWorkerIDs {
		cons.AllowedWorkerIDs = req.AllowedWorkerIDs
		if cons.AllowedWorkerIDs == nil {
			cons.AllowedWorkerIDs = []uint64{}
		}
	}
	target := req.AffinityTarget
	sid, hasSession := req.sessionKey()
	steer := hasSession && p.affinity != nil && req.AffinityTarget == nil && req.PinnedWorker == nil
	var hold *affinityHold
	if steer {
		if book {
			if hold, err = s.holdSession(ctx, p, sid); err != nil {
				return nil, err
			}
			defer hold.drop() // a no-op once committed
			if hold != nil && !hold.init {
				t := hold.target
				target = &t
			}
		} else {
			t, ok, err := p.affinity.query(sid, nil)
			if err != nil {
				return nil, err
			}
			if ok {
				target = &t
			}
		}
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	if req.Prompt.LoraName != "" {
		cons.AllowedWorkerIDs = s.allowedFor(sn, req, sc)
	}
	q, err := s.prepare(p, sn, &req.Prompt, req.Override, &cons, sc)
	if err != nil {
		return nil, err
	}
	if req.HasSessionContext {
		q.req.Session = &req.SessionContext
	}
	if p.queue != nil && !(req.Advisory && !book) {
		dispatched, err := s.admit(ctx, p, &q, req, &cons, sc)
		if dispatched {
			defer p.queue.done()
		}
		if err != nil {
			return nil, err
		}
		sn = q.sn
	}
	cands := sc.cands
	if target != nil {
		cands = restrictToTarget(cands, *target)
	}
	pol, err := s.policyOf(p, req.Override)
	if err != nil {
		return nil, err
	}
	sc.params, sc.req = q.params, q.req
	sc.ctx = sched.SelectionContext{Params: &sc.params, Request: &sc.req, Rand: s.rng}
	params, seq, isl, bs := &sc.params, q.seq, q.req.ISLTokens, q.req.BlockSize
	n := len(cands)
	sc.costs = slices.Grow(sc.costs[:0], n)[:n]
	if len(pol.Scorers) > 1 {
		sc.part = slices.Grow(sc.part[:0], n)[:n]
	}
	cands, pick, err := pol.Choose(&sc.ctx, cands, sc.costs, sc.part)
	sc.req.Session = nil // the request's, not the pool's to keep
	if err != nil {
		return nil, fromSched(err)
	}
	c := &cands[pick]

	v, wl := sn.load(c.Worker)
	out.ModelName, out.RoutingGroup = p.model, p.group
	out.WorkerID, out.DPRank = c.Worker.WorkerID, c.Worker.DPRank
	out.Endpoint = v.endpoint
	out.BlockSize = sn.blockSize
	out.EffectivePrefillTokens = sched.EffectivePrefillTokens(isl, sched.CachedTokens(params, bs, c))
	out.PotentialDecodeBlocks = sched.SelectedDecodeBlocks(&q.req, c, len(seq))
	out.DecodeBusy, out.DecodeBusyKnown = sched.DecodeBusy(out.PotentialDecodeBlocks, v.totalKVBlocks, s.cfg.Sched.DecodeBusyThreshold)
	summarize(&out.Overlap, sc.res.Matches, c.Worker, bs)
	if req.Advisory && !book {
		// The worker's booked prefill, without this request's own prompt:
		// the reference's advisory load is the scheduler's view before
		// admission (ai-dynamo/dynamo:lib/kv-router/src/scheduling/queue.rs,
		// select_without_admission), so an idle worker reports 0.
		ap := c.ActivePrefillTokens
		wli := &out.WorkerLoad
		out.HasWorkerLoad = true
		wli.ActivePrefillTokens = ap
		wli.PrefillTokenCapacity = sched.PrefillCapacity(v.maxBatched)
		wli.TotalKVBlocks = v.totalKVBlocks
		wli.PrefillBusy, wli.PrefillBusyKnown = sched.PrefillBusy(ap, v.maxBatched, s.cfg.Sched.PrefillBusyThreshold)
	}
	if req.HasSelectionID {
		out.SelectionID, out.HasSelectionID = req.SelectionID, true
	}
	if !book {
		if req.HasSelectionID {
			s.cacheSelection(p, req, c.Worker, seq, q.local, isl, out.EffectivePrefillTokens, params, steer, sid)
		}
		return nil, nil
	}
	id := req.SelectionID
	if !req.HasSelectionID {
		id = newUUID()
	}
	out.SelectionID, out.HasSelectionID = id, true
	bk := booking{
		p: p, id: id, worker: c.Worker, load: wl, seq: seq, local: q.local, effective: out.EffectivePrefillTokens,
		track: params.TrackPrefillTokens, reuse: params.AssumeKVReuse, lora: req.LoraName,
		expected: req.ExpectedOutputTokens, hasExpected: req.HasExpectedOutputTokens, lease: lease,
	}
	if hold != nil {
		w := c.Worker
		bk.commit = func() (Lease, error) { return s.commitSession(p, hold, w) }
	}
	if err := s.book(&bk); err != nil {
		return nil, err
	}
	out.Booked = true
	out.SequenceHashes = append(out.SequenceHashes, seq...)
	out.ISLTokens = isl
	out.TrackPrefillTokens = params.TrackPrefillTokens
	if sn.hintCapable {
		if p.retainsChain() {
			s.attachHint(p, sn, sc.res.Matches, q.local, c.Worker, c.DeviceBlocks, out)
		} else {
			s.hintsNeedIndex()
		}
	}
	return bk.rec, nil
}

// policyOf returns the selection policy of a request on partition p: the
// one its override names (routing_policy), else the partition's.
func (s *Service) policyOf(p *partition, ov *Override) (*sched.SelectionPolicy, error) {
	if ov == nil || ov.RoutingPolicy == "" {
		return p.policy, nil
	}
	if pol, ok := s.policies[ov.RoutingPolicy]; ok {
		return pol, nil
	}
	return nil, errorf(ErrBadRequest, "unknown routing_policy %q", ov.RoutingPolicy)
}

// cacheSelection stores a /select's booking inputs for a later replay,
// with its session id when the session steered the selection (so that
// the replay binds it).
func (s *Service) cacheSelection(p *partition, req *SelectRequest, w WorkerKey, seq, local []uint64, isl, effective int64, params *sched.Params, steer bool, sid string) {
	e := &pendingEntry{
		key:           pendingKey{p.model, p.group, cloneString(req.SelectionID)},
		worker:        w,
		seq:           slices.Clone(seq),
		isl:           isl,
		effective:     effective,
		trackPrefill:  params.TrackPrefillTokens,
		assumeKVReuse: params.AssumeKVReuse,
		lora:          cloneString(req.LoraName),
	}
	if p.records() {
		// A replay records what the select would have: keep the prompt's
		// local hashes.
		e.local = slices.Clone(local)
	}
	if req.HasExpectedOutputTokens {
		eo := req.ExpectedOutputTokens
		e.expectedOutputTokens = &eo
	}
	if steer {
		e.session, e.hasSession = cloneString(sid), true
	}
	s.pending.insert(e, s.clock())
}

// summarize fills o with the overlap summary of worker w's ranks.
func summarize(o *Overlap, ms []radix.Match, w radix.WorkerKey, bs int64) {
	o.DP = o.DP[:0]
	selected := false
	for i := range ms {
		m := &ms[i]
		if m.Worker.WorkerID != w.WorkerID {
			continue
		}
		gpu, cpu, disk := m.Cumulative()
		o.GPU = max(o.GPU, int64(gpu)*bs)
		o.CPU = max(o.CPU, int64(cpu)*bs)
		o.Disk = max(o.Disk, int64(disk)*bs)
		o.DP = append(o.DP, RankTokens{m.Worker.DPRank, int64(gpu) * bs})
		selected = selected || m.Worker.DPRank == w.DPRank
	}
	if !selected {
		o.DP = append(o.DP, RankTokens{w.DPRank, 0})
	}
	if len(o.DP) > 1 {
		slices.SortFunc(o.DP, func(a, b RankTokens) int { return cmp.Compare(a.DPRank, b.DPRank) })
	}
	o.LongestMatched = max(o.GPU, o.CPU, o.Disk)
}

// newUUID returns a random UUID v4 string.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, x := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hex[x>>4], hex[x&0xf]
		j += 2
	}
	return string(out[:])
}

// cloneString copies s so that it does not alias a request buffer.
func cloneString(s string) string {
	if s == "" {
		return ""
	}
	return string(append([]byte(nil), s...))
}
