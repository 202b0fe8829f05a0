package sched

// SessionContext is a request's session metadata as the caller sent it
// (session_context; the reference's SessionContext,
// ai-dynamo/dynamo:lib/kv-router/src/protocols.rs): carried whole and
// preserved for policies. The built-in scorer ignores it; session
// affinity reads only SessionID. Strings may alias the caller's buffers
// for the length of one selection.
type SessionContext struct {
	SessionID       string
	ParentSessionID string
	HasParent       bool
	SessionFinal    bool
	HasSessionFinal bool
	// InputTrigger is "user_message", "tool_result", "other", or "" when
	// absent.
	InputTrigger string
	// AgentHeaders are upstream-captured header names with their ordered
	// values, in the body's order; never interpreted.
	AgentHeaders []AgentHeader
}

// AgentHeader is one agent_headers entry.
type AgentHeader struct {
	Name   string
	Values []string
}

// Reset empties c, keeping the headers' capacity.
func (c *SessionContext) Reset() {
	h := c.AgentHeaders[:0]
	clear(c.AgentHeaders[:cap(c.AgentHeaders)])
	*c = SessionContext{AgentHeaders: h}
}
