package zmqin

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFrames marks a live ZMQ message that is not [topic, seq, payload] with
// an 8-byte seq. Such a message is counted and skipped by the listener; it
// never reaches the decoder and never moves the sequence watermark.
var ErrFrames = errors.New("zmqin: bad frames")

// SeqLen is the size of the sequence frame: a big-endian u64.
const SeqLen = 8

// ReplayEndSeq is the sequence the publisher's replay socket sends (with an
// empty payload) after the last replayed batch; it never appears live.
const ReplayEndSeq = ^uint64(0)

// ParseFrames splits one live message of a vLLM/SGLang KV event publisher,
// [topic, seq (8 bytes, big-endian), payload], into its sequence number and
// payload. The topic is ignored (the SUB socket subscribes to everything).
// Any other frame count, or a seq frame that is not exactly 8 bytes, is an
// error wrapping ErrFrames. payload aliases frames[2].
func ParseFrames(frames [][]byte) (seq uint64, payload []byte, err error) {
	if len(frames) != 3 {
		return 0, nil, fmt.Errorf("%w: %d frames, want 3 [topic, seq, payload]", ErrFrames, len(frames))
	}
	if len(frames[1]) != SeqLen {
		return 0, nil, fmt.Errorf("%w: seq frame of %d bytes, want %d", ErrFrames, len(frames[1]), SeqLen)
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// ParseReplayReply splits one message a DEALER receives from a replay
// ROUTER (vllm-project/vllm:vllm/distributed/kv_events.py, which sends
// each buffered batch from the requested seq on, then the end marker):
// ["", seq, payload] (vLLM <= 0.25, SGLang) or ["", topic, seq, payload]
// (vLLM >= 0.26, Dynamo's mocker). end is true for the end marker: seq ReplayEndSeq with an empty
// payload. Any other shape is an error wrapping ErrFrames. payload aliases
// the last frame.
func ParseReplayReply(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	var sf, pf []byte
	switch len(frames) {
	case 3:
		sf, pf = frames[1], frames[2]
	case 4:
		sf, pf = frames[2], frames[3]
	default:
		return 0, nil, false, fmt.Errorf("%w: replay reply of %d frames, want 3 or 4", ErrFrames, len(frames))
	}
	if len(frames[0]) != 0 {
		return 0, nil, false, fmt.Errorf("%w: replay reply without the empty delimiter", ErrFrames)
	}
	if len(sf) != SeqLen {
		return 0, nil, false, fmt.Errorf("%w: replay seq frame of %d bytes, want %d", ErrFrames, len(sf), SeqLen)
	}
	seq = binary.BigEndian.Uint64(sf)
	return seq, pf, seq == ReplayEndSeq && len(pf) == 0, nil
}
