package epp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/core/text"
)

// Header and metadata names of the protocol
// (kubernetes-sigs/gateway-api-inference-extension:docs/proposals/004-endpoint-picker-protocol/README.md),
// of Dynamo's EPP (ai-dynamo/dynamo:deploy/inference-gateway/ext-proc/src/server.rs)
// and of llm-d's P/D sidecar (llm-d/llm-d-router: x-prefiller-host-port).
const (
	DestinationHeader   = "x-gateway-destination-endpoint"
	SubsetKey           = "x-gateway-destination-endpoint-subset"
	ServedKey           = "x-gateway-destination-endpoint-served"
	DefaultMetadataNS   = "envoy.lb"
	DefaultSubsetNS     = "envoy.lb.subset_hint"
	SessionHeader       = "x-dynamo-session-id"
	PolicyClassHeader   = "x-dynamo-meta-policy-class"
	PrefillIDHeader     = "x-dynamo-prefill-instance-id"
	PrefillRankHeader   = "x-dynamo-prefill-dp-rank"
	PrefillerHostHeader = "x-prefiller-host-port"
)

// DefaultMaxBodyBytes bounds an accumulated request body: the selection
// service's own body limit (httpapi.DefaultMaxRequestBodySize).
const DefaultMaxBodyBytes = 8 << 20

// bodyChunk is the largest body chunk the server sends back in full
// duplex: llm-d's BodyByteLimit and Dynamo's, under Envoy's 64 KiB
// advice (envoyproxy/envoy:api/envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto).
const bodyChunk = 62_000

// maxSSELine bounds the part of one SSE line kept across response
// chunks (Dynamo's partial-line cap); maxJSONResponse the JSON response
// body kept to read its usage. Past either, the usage is not read and
// the counted events stand.
const (
	maxSSELine      = 64 << 10
	maxJSONResponse = 4 << 20
)

// Config configures a Server. The zero value of every field but
// Tokenizers is a working default (Validate fills them).
type Config struct {
	// ModelName is the partition's model (Dynamo's DYN_MODEL_NAME): every
	// pick targets it whatever the body's model. "" uses the body's model
	// (core's default partition when the body has none).
	ModelName string
	// RoutingGroup is the aggregated pool's routing group ("": core's
	// default).
	RoutingGroup string
	// Disaggregated plans every request in two pools with core's
	// DisaggCoordinator (PrefillRoutingGroup, DecodeRoutingGroup: core's
	// defaults when ""); the destination is the decode worker and the
	// prefill worker is named in headers for the upstream.
	Disaggregated                           bool
	PrefillRoutingGroup, DecodeRoutingGroup string
	// Tokenizers are the models' tokenizers by name (--model-path). The
	// body's model chooses one, else ModelName's, else the only one. nil:
	// no tokenization, picks by load only.
	Tokenizers map[string]*text.Tokenizer
	// BlockSize is the output block of a booking whose selection reports
	// none (a disaggregated plan's legs); > 0.
	BlockSize uint32
	// MaxBodyBytes bounds an accumulated request body; larger is a 413.
	MaxBodyBytes int
	// MetadataNamespace carries the destination in the dynamic metadata
	// and the served endpoint in the request metadata; SubsetNamespace
	// carries the subset hint.
	MetadataNamespace, SubsetNamespace string
	// Fallbacks is how many endpoints follow the booked one in the
	// destination list (0: none), in ascending potential load. They are
	// not booked: the booking stays on the first.
	Fallbacks int
	// FullDuplex is the body mode assumed when the gateway sends no
	// protocol_config (Envoy before 1.32): true (the default when
	// Validate fills it) is FULL_DUPLEX_STREAMED, false BUFFERED.
	FullDuplex *bool
	// Observer receives every request's Observation at its stream's end
	// (nil: none; the host's per-request metrics).
	Observer Observer
	// Logger receives rare warnings (nil: discarded).
	Logger *slog.Logger
	// Now is the chat template's clock (nil: time.Now).
	Now func() time.Time
}

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("epp: max body bytes must be > 0, got %d", c.MaxBodyBytes)
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.Fallbacks < 0 || c.Fallbacks > 16 {
		return fmt.Errorf("epp: fallbacks must be in [0, 16], got %d", c.Fallbacks)
	}
	if c.MetadataNamespace == "" {
		c.MetadataNamespace = DefaultMetadataNS
	}
	if c.SubsetNamespace == "" {
		c.SubsetNamespace = DefaultSubsetNS
	}
	if c.FullDuplex == nil {
		t := true
		c.FullDuplex = &t
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Disaggregated && c.PrefillRoutingGroup != "" && c.PrefillRoutingGroup == c.DecodeRoutingGroup {
		return errors.New("epp: the prefill and decode routing groups must differ")
	}
	return nil
}
