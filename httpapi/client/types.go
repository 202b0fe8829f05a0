package client

// The bodies of the selection API, as JSON. Optional request fields are
// pointers or omitted when empty; response fields the server may omit are
// pointers. Names follow the API's fields.

// Prompt is a request's prompt: TokenIDs (the selector hashes them), or
// the precomputed hash-only form (BlockHashes, SequenceHashes, ISLTokens),
// or Text (kvselect's extension: the selector tokenizes it with the
// model's --model-path tokenizer; without TokenIDs and BlockHashes only),
// or Messages (the same, for a chat: rendered with the model's chat
// template, Tools given to it, then tokenized as vLLM's chat endpoint
// does).
type Prompt struct {
	Text           string        `json:"prompt,omitempty"`
	Messages       []ChatMessage `json:"messages,omitempty"`
	Tools          []any         `json:"tools,omitempty"`
	ChatTemplate   string        `json:"chat_template,omitempty"` // with Messages: in place of the tokenizer's
	TokenIDs       []uint32      `json:"token_ids,omitempty"`
	BlockHashes    []int64       `json:"block_hashes,omitempty"`
	SequenceHashes []int64       `json:"sequence_hashes,omitempty"`
	ISLTokens      int64         `json:"isl_tokens,omitempty"`
	LoraName       string        `json:"lora_name,omitempty"`
	CacheSalt      string        `json:"cache_salt,omitempty"`
}

// ChatMessage is one message object of a chat, as the OpenAI API spells
// it: "role", "content" (a string, or a list of parts such as {"type":
// "text", "text": "..."}), and what templates read beside them
// ("tool_calls", "tool_call_id", "name", "reasoning_content").
type ChatMessage map[string]any

// RouterConfigOverride overrides the router's scoring for one request.
type RouterConfigOverride struct {
	OverlapScoreCredit    *float64 `json:"overlap_score_credit,omitempty"`
	PrefillLoadScale      *float64 `json:"prefill_load_scale,omitempty"`
	RouterTemperature     *float64 `json:"router_temperature,omitempty"`
	SharedCacheMultiplier *float64 `json:"shared_cache_multiplier,omitempty"`
	AssumeKVReuse         *bool    `json:"assume_kv_reuse,omitempty"`
	TrackPrefillTokens    *bool    `json:"track_prefill_tokens,omitempty"`
}

// WorkerRank names a worker and, optionally, one of its data-parallel
// ranks.
type WorkerRank struct {
	WorkerID uint64  `json:"worker_id"`
	DPRank   *uint32 `json:"dp_rank,omitempty"`
}

// RoutingConstraints restrict and weigh workers by their taints.
type RoutingConstraints struct {
	RequiredTaints  []string           `json:"required_taints,omitempty"`
	PreferredTaints map[string]float64 `json:"preferred_taints,omitempty"`
}

// SelectRequest is the body of Select and SelectAndReserve.
type SelectRequest struct {
	// ModelName and RoutingGroup name the partition ("default" when
	// empty).
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`
	// SelectionID: on Select, caches the selection for Reserve; on
	// SelectAndReserve, the booking id (the server makes a UUID when
	// empty).
	SelectionID string `json:"selection_id,omitempty"`
	Prompt
	ExpectedOutputTokens *uint32               `json:"expected_output_tokens,omitempty"`
	RouterConfigOverride *RouterConfigOverride `json:"router_config_override,omitempty"`
	SessionID            string                `json:"session_id,omitempty"`
	PinnedWorker         *WorkerRank           `json:"pinned_worker,omitempty"`
	AffinityTarget       *WorkerRank           `json:"affinity_target,omitempty"`
	AllowedWorkerIDs     []uint64              `json:"allowed_worker_ids,omitempty"`
	RoutingConstraints   *RoutingConstraints   `json:"routing_constraints,omitempty"`
	// Advisory (Select only) skips queue admission and adds WorkerLoad.
	Advisory bool `json:"advisory,omitempty"`
}

// Overlap is the matched prompt by tier, in tokens (cumulative: GPU <= CPU
// <= Disk), and per data-parallel rank of the chosen worker.
type Overlap struct {
	LongestMatched int64            `json:"longest_matched"`
	GPU            int64            `json:"gpu"`
	DP             map[string]int64 `json:"dp"`
	CPU            int64            `json:"cpu"`
	Disk           int64            `json:"disk"`
}

// WorkerLoad is an advisory Select's view of the chosen worker's load.
type WorkerLoad struct {
	ActivePrefillTokens  int64 `json:"active_prefill_tokens"`
	PrefillTokenCapacity int64 `json:"prefill_token_capacity"`
	TotalKVBlocks        int64 `json:"total_kv_blocks,omitempty"`
	PrefillBusy          *bool `json:"prefill_busy,omitempty"`
}

// Selection is the chosen worker: where to send the request.
type Selection struct {
	SelectionID string `json:"selection_id,omitempty"`
	// SequenceHashes, ISLTokens and TrackPrefillTokens: the normalized
	// booking inputs (SelectAndReserve only), for an explicit Reserve on
	// another replica.
	SequenceHashes     []int64 `json:"sequence_hashes,omitempty"`
	ISLTokens          int64   `json:"isl_tokens,omitempty"`
	TrackPrefillTokens *bool   `json:"track_prefill_tokens,omitempty"`

	ModelName              string      `json:"model_name"`
	RoutingGroup           string      `json:"routing_group"`
	WorkerID               uint64      `json:"worker_id"`
	DPRank                 uint32      `json:"dp_rank"`
	Endpoint               string      `json:"endpoint"`
	BlockSize              uint32      `json:"block_size"`
	Overlap                Overlap     `json:"overlap"`
	EffectivePrefillTokens int64       `json:"effective_prefill_tokens"`
	PotentialDecodeBlocks  int64       `json:"potential_decode_blocks"`
	DecodeBusy             *bool       `json:"decode_busy,omitempty"`
	WorkerLoad             *WorkerLoad `json:"worker_load,omitempty"`
	// KVHint (bookings only): another worker of the same type holds a
	// longer cached prefix the chosen one may fetch.
	KVHint *KVHint `json:"kv_hint,omitempty"`
}

// KVHint is the reference's versioned action envelope of a kv hint.
type KVHint struct {
	ProtocolVersion string `json:"protocol_version"`
	MessageID       string `json:"message_id"`
	Actions         []struct {
		ActionID      string `json:"action_id"`
		ActionType    string `json:"action_type"`
		ActionVersion string `json:"action_version"`
		Payload       struct {
			SourceControlEndpoint string   `json:"source_control_endpoint"`
			BlockHashes           []uint64 `json:"block_hashes"`
		} `json:"payload"`
	} `json:"actions"`
}

// SessionContext is the session metadata of a selection; with it the
// flat SessionID is ignored.
type SessionContext struct {
	SessionID       string              `json:"session_id"`
	ParentSessionID string              `json:"parent_session_id,omitempty"`
	SessionFinal    *bool               `json:"session_final,omitempty"`
	InputTrigger    string              `json:"input_trigger,omitempty"` // user_message, tool_result or other
	AgentHeaders    map[string][]string `json:"agent_headers,omitempty"`
}

// ReservationRequest is the body of Reserve. With WorkerID nil it is the
// cached-selection replay form: SelectionID, ModelName and RoutingGroup
// of an earlier Select, every other field ignored. With WorkerID set it
// is the explicit form: the worker, its rank and the prompt.
type ReservationRequest struct {
	SelectionID  string `json:"selection_id"`
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`

	WorkerID *uint64 `json:"worker_id,omitempty"`
	DPRank   uint32  `json:"dp_rank,omitempty"`
	Prompt
	EffectivePrefillTokens *int64                `json:"effective_prefill_tokens,omitempty"`
	TrackPrefillTokens     *bool                 `json:"track_prefill_tokens,omitempty"`
	ExpectedOutputTokens   *uint32               `json:"expected_output_tokens,omitempty"`
	RouterConfigOverride   *RouterConfigOverride `json:"router_config_override,omitempty"`
}

// Reservation is a booking.
type Reservation struct {
	SelectionID  string `json:"selection_id"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	WorkerID     uint64 `json:"worker_id"`
	DPRank       uint32 `json:"dp_rank"`
	Endpoint     string `json:"endpoint"`
}

// WorkerFields are a worker's catalog fields. In a Worker (POST) unset
// fields are unset in the record; in a WorkerPatch only the set ones
// change.
type WorkerFields struct {
	Endpoint              *string           `json:"endpoint,omitempty"`
	KVEventsEndpoint      *string           `json:"kv_events_endpoint,omitempty"`
	KVEventsEndpoints     map[string]string `json:"kv_events_endpoints,omitempty"`
	ReplayEndpoint        *string           `json:"replay_endpoint,omitempty"`
	BlockSize             *uint32           `json:"block_size,omitempty"`
	DataParallelStartRank *uint32           `json:"data_parallel_start_rank,omitempty"`
	DataParallelSize      *uint32           `json:"data_parallel_size,omitempty"`
	MaxNumBatchedTokens   *uint64           `json:"max_num_batched_tokens,omitempty"`
	TotalKVBlocks         *uint64           `json:"total_kv_blocks,omitempty"`
	StableRoutingID       *string           `json:"stable_routing_id,omitempty"`
	IsEagle               *bool             `json:"is_eagle,omitempty"`
	Taints                []string          `json:"taints,omitempty"`
	// LoraAdapters is kvselect's extension: the LoRA adapters the worker
	// serves, which narrow the candidates of a request naming one.
	LoraAdapters                     []string          `json:"lora_adapters,omitempty"`
	TopologyDomains                  map[string]string `json:"topology_domains,omitempty"`
	KVTransferDomain                 *string           `json:"kv_transfer_domain,omitempty"`
	KVTransferEnforcement            *string           `json:"kv_transfer_enforcement,omitempty"`
	KVTransferPreferredWeight        *float64          `json:"kv_transfer_preferred_weight,omitempty"`
	RouterHintWorkerType             *string           `json:"router_hint_worker_type,omitempty"`
	RouterHintSourceControlEndpoints map[string]string `json:"router_hint_source_control_endpoints,omitempty"`
	KVEventSourceMode                *string           `json:"kv_event_source_mode,omitempty"`
}

// Worker is the body of UpsertWorker: the whole record.
type Worker struct {
	WorkerID     uint64 `json:"worker_id"`
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`
	WorkerFields
}

// WorkerPatch is the body of PatchWorker.
type WorkerPatch = WorkerFields

// Listener is the state of one rank's KV-event listener (kvselect's own).
type Listener struct {
	DPRank    uint32  `json:"dp_rank"`
	Endpoint  string  `json:"endpoint"`
	State     string  `json:"state"`
	LastSeq   *uint64 `json:"last_seq"`
	LastError string  `json:"last_error,omitempty"`
	Batches   uint64  `json:"batches"`
	Gaps      uint64  `json:"gaps"`
	Replays   uint64  `json:"replays"`
	Restarts  uint64  `json:"restarts"`
}

// WorkerRecord is a catalog record.
type WorkerRecord struct {
	WorkerID     uint64 `json:"worker_id"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	// Lifecycle is incomplete, schedulable, draining or unschedulable.
	Lifecycle string `json:"lifecycle"`
	WorkerFields
	NotSchedulableReasons []string   `json:"not_schedulable_reasons,omitempty"`
	Listeners             []Listener `json:"kv_event_listeners,omitempty"`
}

// Recovery is what startup recovery restored.
type Recovery struct {
	Peer        string `json:"peer"`
	Partitions  int    `json:"partitions"`
	Events      int    `json:"events"`
	FailedPeers int    `json:"failed_peers"`
}

// Readiness is GET /ready's body.
type Readiness struct {
	Ready              bool           `json:"ready"`
	SchedulableWorkers int            `json:"schedulable_workers"`
	Workers            []WorkerRecord `json:"workers"`
	Recovery           *Recovery      `json:"recovery,omitempty"`
}

// PotentialLoad is one worker rank's load.
type PotentialLoad struct {
	WorkerID               uint64 `json:"worker_id"`
	DPRank                 uint32 `json:"dp_rank"`
	PotentialPrefillTokens int64  `json:"potential_prefill_tokens"`
	PotentialDecodeBlocks  int64  `json:"potential_decode_blocks"`
	ActiveRequests         int64  `json:"active_requests"`
}

// PartitionLoads is one partition of Loads.
type PartitionLoads struct {
	ModelName        string          `json:"model_name"`
	RoutingGroup     string          `json:"routing_group"`
	Loads            []PotentialLoad `json:"loads"`
	PendingCount     int64           `json:"pending_count"`
	PendingISLTokens int64           `json:"pending_isl_tokens"`
}

// QueryRequest is the body of PotentialLoads and OverlapScores.
type QueryRequest struct {
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`
	Prompt
	RouterConfigOverride *RouterConfigOverride `json:"router_config_override,omitempty"`
}

// OverlapRow is one worker rank's tiered overlap, in blocks (cumulative).
type OverlapRow struct {
	WorkerID                  uint64  `json:"worker_id"`
	DPRank                    uint32  `json:"dp_rank"`
	DeviceBlocks              int64   `json:"device_blocks"`
	HostPinnedBlocks          int64   `json:"host_pinned_blocks"`
	DiskBlocks                int64   `json:"disk_blocks"`
	HostPinnedExtensionBlocks int64   `json:"host_pinned_extension_blocks"`
	DiskExtensionBlocks       int64   `json:"disk_extension_blocks"`
	SharedBeyondDeviceBlocks  *int64  `json:"shared_beyond_device_blocks"`
	RouterCreditBlocks        float64 `json:"router_credit_blocks"`
}

// OverlapScores is OverlapScores' answer.
type OverlapScores struct {
	BlockSize   uint32       `json:"block_size"`
	NumBlocks   int          `json:"num_blocks"`
	Workers     []OverlapRow `json:"workers"`
	SharedCache struct {
		Enabled        bool       `json:"enabled"`
		TotalHitBlocks int64      `json:"total_hit_blocks"`
		Ranges         [][2]int64 `json:"ranges"`
		Error          *string    `json:"error"`
	} `json:"shared_cache"`
}
