package natsplane

import (
	"fmt"
	"strings"
)

// Topics of Dynamo's event plane that kvselect speaks
// (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs KV_EVENT_SUBJECT,
// lib/llm/src/kv_router.rs ACTIVE_SEQUENCES_SUBJECT).
const (
	// TopicKVEvents carries workers' RouterEvents (since Dynamo 0.8).
	TopicKVEvents = "kv-events"
	// TopicKVEventsLegacy is the topic's name up to Dynamo 0.7.
	TopicKVEventsLegacy = "kv_events"
	// TopicActiveSequences carries routers' ActiveSequenceEvents.
	TopicActiveSequences = "active_sequences_events"
)

// Scope is the part of a subject before its topic: a Dynamo namespace, a
// component in it, and optionally an endpoint of the component
// (ai-dynamo/dynamo:lib/runtime/src/discovery/mod.rs, EventScope). Since
// Dynamo #11841 (2026-07-18) workers publish KV events and routers their
// bookings on the endpoint scope; before, on the component scope.
type Scope struct {
	Namespace, Component, Endpoint string
}

// Validate reports a scope without a namespace or component.
func (s Scope) Validate() error {
	if s.Namespace == "" || s.Component == "" {
		return fmt.Errorf("%w: the event-plane scope needs a namespace and a component, got %q/%q", ErrConfig, s.Namespace, s.Component)
	}
	return nil
}

// ComponentScope is s without its endpoint.
func (s Scope) ComponentScope() Scope { return Scope{Namespace: s.Namespace, Component: s.Component} }

// Subject returns the NATS subject of topic in scope s:
// namespace.{ns}.component.{c}[.endpoint.{e}].{topic}, every segment
// escaped by EncodeSegment. It is EventScope::subject.
func (s Scope) Subject(topic string) string {
	var b strings.Builder
	b.WriteString("namespace.")
	b.WriteString(EncodeSegment(s.Namespace))
	if s.Component != "" {
		b.WriteString(".component.")
		b.WriteString(EncodeSegment(s.Component))
		if s.Endpoint != "" {
			b.WriteString(".endpoint.")
			b.WriteString(EncodeSegment(s.Endpoint))
		}
	}
	b.WriteByte('.')
	b.WriteString(EncodeSegment(topic))
	return b.String()
}

// EncodeSegment escapes one subject segment exactly as Dynamo's
// encode_event_segment (ai-dynamo/dynamo:lib/runtime/src/discovery/mod.rs):
// ASCII letters, digits, '-' and '_' are kept, every other byte (of the
// UTF-8 encoding) becomes '%' and two uppercase hex digits. So "my.ns"
// gives "my%2Ens" and a NATS wildcard or separator can never change a
// subject's identity. Names made of [A-Za-z0-9_-] are unchanged, which is
// also what Dynamo before #11841 (no escaping) produced.
func EncodeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	keep := true
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			keep = false
			break
		}
	}
	if keep {
		return s
	}
	b := make([]byte, 0, len(s)*3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
