package core

import (
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// Types of radix and sched that appear in core's API, re-exported so that
// hosts (httpapi may import core but not radix or sched: the import-direction
// test in cmd/kvselect) can
// name them.
type (
	// WorkerKey is one (worker_id, dp_rank).
	WorkerKey = radix.WorkerKey
	// Override is a request's router_config_override.
	Override = sched.Override
	// PreferredTaint is one routing_constraints.preferred_taints entry.
	PreferredTaint = sched.PreferredTaint
	// Event is one KV event (a /dump RouterEvent).
	Event = radix.Event
	// SessionContext is a request's session_context.
	SessionContext = sched.SessionContext
	// AgentHeader is one session_context.agent_headers entry.
	AgentHeader = sched.AgentHeader
	// QueueRejection is a router queue's refusal at a class cap (the
	// details of an overloaded answer).
	QueueRejection = sched.QueueRejection
	// Match is one worker rank's tiered match (IndexerMatch.Matches).
	Match = radix.Match
	// MatchResult is what a PrimaryIndex fills.
	MatchResult = radix.Result
	// ApproxStats are an approximate index's counters (Stats.Approx).
	ApproxStats = radix.ApproxStats
)

// NumTiers is the length of Stats.IndexBlocks.
const NumTiers = radix.NumTiers

// TierName returns the storage_tier name of Stats.IndexBlocks[t].
func TierName(t int) string { return radix.Tier(t).String() }

// AppendEventJSON appends ev in the /dump RouterEvent JSON format (the
// reference's RouterEvent, ai-dynamo/dynamo:lib/kv-router/src/protocols.rs).
func AppendEventJSON(dst []byte, ev *Event) []byte { return radix.AppendEventJSON(dst, ev) }

// ParseEventJSON decodes one RouterEvent of the /dump format.
func ParseEventJSON(data []byte) (Event, error) { return radix.ParseEventJSON(data) }
