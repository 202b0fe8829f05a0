package natsplane

import (
	"errors"
	"fmt"

	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// Errors of the codec. Every decode error wraps ErrMalformed.
var (
	// ErrMalformed marks a message that is not what its topic carries: an
	// envelope, a RouterEvent batch, an ActiveSequenceEvent.
	ErrMalformed = errors.New("natsplane: malformed message")
	// ErrConfig marks an invalid Config.
	ErrConfig = errors.New("natsplane: invalid configuration")

	errEnvTrailing = fmt.Errorf("%w: trailing bytes after the envelope", ErrMalformed)
	errEnvMissing  = fmt.Errorf("%w: envelope lacks a field", ErrMalformed)
	errEnvShape    = fmt.Errorf("%w: not an EventEnvelope", ErrMalformed)
)

// Envelope is Dynamo's EventEnvelope
// (ai-dynamo/dynamo:lib/runtime/src/transports/event_plane/traits.rs),
// the body of every event-plane message since Dynamo #5624 (2026-01-23),
// written by rmp_serde::to_vec_named (codec.rs, MsgpackCodec):
//
//	{publisher_id: u64, sequence: u64, published_at: u64 (Unix ms),
//	 topic: str, payload: bin}
//
// PublisherID identifies one EventPublisher (one per (scope, topic) in a
// process; since #11014 a random id per publisher, masked to 53 bits
// since #12185); Sequence counts its envelopes from 0. Payload is the
// msgpack of the topic's event and aliases the decoded bytes.
type Envelope struct {
	PublisherID uint64
	Sequence    uint64
	PublishedAt uint64
	Topic       []byte
	Payload     []byte
}

var envelopeFields = [...]string{"publisher_id", "sequence", "published_at", "topic", "payload"}

// DecodeEnvelope decodes one message body. Keys may come in any order,
// unknown keys are skipped (a newer publisher's published_at_ns), and a
// positional array in declaration order is accepted too, as rmp_serde
// accepts it. Every field is required. Topic and Payload alias b.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	r := &msgpack.Reader{B: b}
	var have uint8
	err := structFields(r, envelopeFields[:], func(i int) error {
		have |= 1 << i
		var err error
		switch i {
		case 0:
			e.PublisherID, err = u64(r)
		case 1:
			e.Sequence, err = u64(r)
		case 2:
			e.PublishedAt, err = u64(r)
		case 3:
			e.Topic, err = r.Str()
		case 4:
			// rmp_serde's bytes deserializer takes a bin or a str;
			// Dynamo writes bin.
			if e.Payload, err = r.Bin(); errors.Is(err, msgpack.ErrType) {
				e.Payload, err = r.Str()
			}
		}
		return err
	})
	switch {
	case err != nil:
		return Envelope{}, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
	case r.Left() != 0:
		return Envelope{}, errEnvTrailing
	case have != 1<<len(envelopeFields)-1:
		return Envelope{}, errEnvMissing
	}
	return e, nil
}

// AppendEnvelope appends an envelope around payload as
// rmp_serde::to_vec_named writes it (Dynamo's encode_envelope_parts): a
// map of the five fields in declaration order, integers in their smallest
// form, the payload as bin.
func AppendEnvelope(dst []byte, publisherID, sequence, publishedAt uint64, topic string, payload []byte) []byte {
	dst = msgpack.AppendMapHeader(dst, 5)
	dst = msgpack.AppendStr(dst, "publisher_id")
	dst = msgpack.AppendUint(dst, publisherID)
	dst = msgpack.AppendStr(dst, "sequence")
	dst = msgpack.AppendUint(dst, sequence)
	dst = msgpack.AppendStr(dst, "published_at")
	dst = msgpack.AppendUint(dst, publishedAt)
	dst = msgpack.AppendStr(dst, "topic")
	dst = msgpack.AppendStr(dst, topic)
	dst = msgpack.AppendStr(dst, "payload")
	return msgpack.AppendBin(dst, payload)
}

// EnvelopeOverhead bounds what AppendEnvelope adds around a payload and
// topic: 5 keys (52 bytes with headers), 3 integers of at most 9 bytes,
// the topic's and the payload's headers (5 each).
const EnvelopeOverhead = 96

// Kind of a message body, by its first byte (spec: event-plane.md §2.5).
type bodyKind uint8

const (
	bodyEnvelope bodyKind = iota + 1 // a msgpack map or array: an EventEnvelope
	bodyJSON                         // '{': the JSON RouterEvent of Dynamo <= 0.8
)

// classify tells an envelope from the legacy JSON body by its first byte:
// fixmap 0x80-0x8f, map16/32 0xde/0xdf (or a positional array 0x90-0x9f,
// 0xdc/0xdd) is msgpack; '{' (0x7b), after optional JSON whitespace, is
// JSON. Anything else is malformed (0).
func classify(b []byte) bodyKind {
	for _, c := range b {
		switch {
		case c >= 0x80 && c <= 0x9f, c == 0xde, c == 0xdf, c == 0xdc, c == 0xdd:
			return bodyEnvelope
		case c == '{':
			return bodyJSON
		case c == ' ', c == '\t', c == '\n', c == '\r':
			continue
		}
		return 0
	}
	return 0
}

// structFields reads a struct written as a map or a positional array
// (msgpack.Reader.Struct); a value neither is not an envelope.
func structFields(r *msgpack.Reader, fields []string, field func(i int) error) error {
	if err := r.Struct(fields, field); err != msgpack.ErrNotStruct {
		return err
	}
	return errEnvShape
}

// u64 reads a non-negative integer.
func u64(r *msgpack.Reader) (uint64, error) {
	v, neg, err := r.Integer()
	if err == nil && neg {
		err = msgpack.ErrType
	}
	return v, err
}
