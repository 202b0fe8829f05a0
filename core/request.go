package core

import "github.com/kvselect/kvselect/sched"

// Prompt is the prompt of a request in one of its forms: tokens (routing
// tokens of mm_routing_info first, then token_ids), or the trusted
// block_hashes + sequence_hashes + isl_tokens trio. The Has
// flags say which fields were present. Slices may alias a caller's buffer;
// core never retains them.
type Prompt struct {
	TokenIDs        []uint32
	HasTokenIDs     bool
	RoutingTokenIDs []uint32 // mm_routing_info.routing_token_ids

	BlockHashes       []uint64 // local block hashes (i64 on the wire)
	HasBlockHashes    bool
	SequenceHashes    []uint64 // tracking hashes (i64 on the wire)
	HasSequenceHashes bool
	ISLTokens         uint64
	HasISLTokens      bool

	LoraName  string
	CacheSalt string

	// IsEagle overrides the partition's is_eagle when HasIsEagle: the
	// local hash of block i then covers tokens [i*bs, i*bs+bs+1).
	IsEagle    bool
	HasIsEagle bool
	// BlockMMHashes[i] are the multimodal object hashes of block i of
	// token_ids (block_mm_infos); RoutingBlockMMHashes those of the routing
	// tokens (mm_routing_info.block_mm_infos). nil or empty: none.
	BlockMMHashes        [][]uint64
	RoutingBlockMMHashes [][]uint64
}

// RetainedBytes is the memory p's reusable slices keep for the next use; a
// pool uses it to drop a request that once held a huge prompt.
func (p *Prompt) RetainedBytes() int {
	return 4*(cap(p.TokenIDs)+cap(p.RoutingTokenIDs)) + 8*(cap(p.BlockHashes)+cap(p.SequenceHashes))
}

// Reset empties p, keeping its slices' capacity.
func (p *Prompt) Reset() {
	*p = Prompt{TokenIDs: p.TokenIDs[:0], RoutingTokenIDs: p.RoutingTokenIDs[:0], BlockHashes: p.BlockHashes[:0], SequenceHashes: p.SequenceHashes[:0]}
}

// SelectRequest is the input of Select and SelectAndReserve. Strings and
// slices may alias the caller's buffers; core copies what it keeps.
type SelectRequest struct {
	ModelName, RoutingGroup string
	SelectionID             string
	HasSelectionID          bool
	Prompt
	// Override is router_config_override; nil when absent.
	Override                *sched.Override
	ExpectedOutputTokens    uint32
	HasExpectedOutputTokens bool
	PriorityJump            float64
	StrictPriority          uint32
	// SessionID is the legacy session_id (HasSessionID: present), ignored
	// when session_context is present.
	SessionID    string
	HasSessionID bool
	// SessionContext is session_context when HasSessionContext: its
	// session_id is the session's key; the rest is carried for policies.
	SessionContext    SessionContext
	HasSessionContext bool
	// AffinityTarget is the explicit affinity_target; nil when absent. It
	// steers selection like a hard binding and takes the session out of
	// affinity (neither steered nor bound).
	AffinityTarget *AffinityTarget
	// PolicyClass is the router policy class the request asks for (the
	// x-dynamo-meta-policy-class header, trimmed); "" is none.
	PolicyClass string
	// PinnedWorker is an exact pin; nil when absent.
	PinnedWorker *WorkerKey
	// AllowedWorkerIDs is the allow-set when HasAllowedWorkerIDs.
	AllowedWorkerIDs    []uint64
	HasAllowedWorkerIDs bool
	RequiredTaints      []string
	PreferredTaints     []sched.PreferredTaint
	// Advisory adds worker_load to a /select (ignored when booking).
	Advisory bool
}

// Reset empties r, keeping slice capacity.
func (r *SelectRequest) Reset() {
	pr := r.Prompt
	pr.Reset()
	// Drop the strings (which may alias a request buffer) from the kept
	// capacity too.
	clear(r.RequiredTaints)
	clear(r.PreferredTaints)
	sc := r.SessionContext
	sc.Reset()
	*r = SelectRequest{Prompt: pr, AllowedWorkerIDs: r.AllowedWorkerIDs[:0], RequiredTaints: r.RequiredTaints[:0], PreferredTaints: r.PreferredTaints[:0], SessionContext: sc}
}

// sessionKey returns the request's session id: session_context's, else the
// legacy session_id; ok is false without either.
func (r *SelectRequest) sessionKey() (id string, ok bool) {
	if r.HasSessionContext {
		return r.SessionContext.SessionID, true
	}
	return r.SessionID, r.HasSessionID
}

// RankTokens is one entry of the overlap summary's dp map.
type RankTokens struct {
	DPRank uint32
	Tokens int64
}

// Overlap is the Mooncake overlap summary of the selected worker, in
// matched tokens (the reference's OverlapSummary): gpu <= cpu <= disk, longest_matched
// their max; DP lists the worker's matched ranks and the selected rank, by
// rank.
type Overlap struct {
	LongestMatched, GPU, CPU, Disk int64
	DP                             []RankTokens
}

// WorkerLoadInfo is an advisory select's worker_load.
type WorkerLoadInfo struct {
	ActivePrefillTokens  int64
	PrefillTokenCapacity int64
	TotalKVBlocks        int64 // 0: unknown, omitted
	PrefillBusy          bool
	PrefillBusyKnown     bool
}

// Selection is the result of a selection (the SelectResponse). Slices are
// reused across calls (Reset); strings point at the request or at
// service-owned immutable strings, so encode it before the request's
// buffers are reused.
type Selection struct {
	SelectionID    string
	HasSelectionID bool // false: selection_id omitted
	// Booked: select_and_reserve; SequenceHashes, ISLTokens and
	// TrackPrefillTokens are reported only then.
	Booked             bool
	SequenceHashes     []uint64
	ISLTokens          int64
	TrackPrefillTokens bool

	ModelName, RoutingGroup string
	WorkerID                uint64
	DPRank                  uint32
	Endpoint                string
	BlockSize               uint32
	Overlap                 Overlap

	EffectivePrefillTokens int64
	PotentialDecodeBlocks  int64
	DecodeBusy             bool
	DecodeBusyKnown        bool // false: decode_busy omitted

	HasWorkerLoad bool
	WorkerLoad    WorkerLoadInfo

	// HasKVHint: a booking response carries a kv_hint (its message_id is
	// SelectionID).
	HasKVHint bool
	KVHint    KVHint
}

// KVHint is the payload of a kv_hint's single kv.fetch action: where the
// target can fetch a longer cached prefix, and the source's external
// sequence hashes of it, root-aligned (entry i is request block i).
type KVHint struct {
	SourceControlEndpoint string
	BlockHashes           []uint64
}

// Reset empties s, keeping slice capacity.
func (s *Selection) Reset() {
	*s = Selection{SequenceHashes: s.SequenceHashes[:0], Overlap: Overlap{DP: s.Overlap.DP[:0]}, KVHint: KVHint{BlockHashes: s.KVHint.BlockHashes[:0]}}
}
