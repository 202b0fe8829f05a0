package httpapi

import (
	"errors"
	"strings"
	"testing"
)

// TestNegativeZeroIsAFloat: serde_json reads the literal -0 as the float
// -0.0 (de.rs parse_number: "Convert into a float if we underflow, or on
// `-0`"), so the reference answers 422 for it in every integer field, i64
// hashes included. Both array paths (fast and generic) and the scalar
// fields must agree.
func TestNegativeZeroIsAFloat(t *testing.T) {
	const float = "invalid type: floating point `-0.0`, expected "
	for body, want := range map[string]string{
		`{"block_hashes":[-0]}`:                          "block_hashes: " + float + "i64",
		`{"sequence_hashes":[1, -0 ,2]}`:                 "sequence_hashes: " + float + "i64",
		`{"block_hashes":[-0,99999999999999999999]}`:     "block_hashes: " + float + "i64",
		`{"allowed_worker_ids":[-0]}`:                    "allowed_worker_ids: " + float + "u64",
		`{"token_ids":[1,-0]}`:                           "token_ids: " + float + "u32",
		`{"isl_tokens":-0}`:                              "isl_tokens: " + float + "usize",
		`{"pinned_worker":{"worker_id":-0,"dp_rank":0}}`: "pinned_worker.worker_id: " + float + "u64",
	} {
		var r selectReq
		err := decodeSelect([]byte(body), &r)
		var de *decodeError
		if !errors.As(err, &de) || de.status != 422 || !strings.Contains(de.msg, want) {
			t.Errorf("%s: got %v, want a 422 containing %q", body, err, want)
		}
	}
	var rr reserveReq
	err := decodeReservation([]byte(`{"selection_id":"x","worker_id":-0}`), &rr)
	var de *decodeError
	if !errors.As(err, &de) || de.status != 422 || !strings.Contains(de.msg, "worker_id: "+float+"u64") {
		t.Errorf("reservation worker_id -0: got %v", err)
	}
	// A leading zero is serde's syntax error (InvalidNumber), with or
	// without the sign: 400, not the -0 type error.
	for _, body := range []string{`{"block_hashes":[-01]}`, `{"isl_tokens":-01}`, `{"token_ids":[01]}`, `{"priority_jump":-00.5}`} {
		var r selectReq
		err := decodeSelect([]byte(body), &r)
		if !errors.As(err, &de) || de.status != 400 || !strings.Contains(de.msg, "invalid number") {
			t.Errorf("%s: got %v, want a 400 invalid number", body, err)
		}
	}
	// A float field takes it, as serde does.
	var r selectReq
	if err := decodeSelect([]byte(`{"priority_jump":-0}`), &r); err != nil {
		t.Errorf("priority_jump -0: %v", err)
	}
}

// TestNumberOutOfRange: serde_json fails a number beyond f64's range with
// NumberOutOfRange, a syntax error (400), whatever the target type; a
// number that only underflows reads as 0.
func TestNumberOutOfRange(t *testing.T) {
	for _, body := range []string{`{"priority_jump":1e400}`, `{"priority_jump":-1.5e309}`, `{"isl_tokens":1e400}`, `{"block_hashes":[1,1e999]}`,
		`{"routing_constraints":{"preferred_taints":{"a":1e400}}}`} {
		var r selectReq
		err := decodeSelect([]byte(body), &r)
		var de *decodeError
		if !errors.As(err, &de) || de.status != 400 || !strings.Contains(de.msg, "number out of range") {
			t.Errorf("%s: got %v, want a 400 number out of range", body, err)
		}
	}
	var r selectReq
	if err := decodeSelect([]byte(`{"priority_jump":1e-400}`), &r); err != nil || r.req.PriorityJump != 0 {
		t.Errorf("underflow: %v, %v", err, r.req.PriorityJump)
	}
	err := decodeSelect([]byte(`{"isl_tokens":1.5}`), &r)
	var de *decodeError
	if !errors.As(err, &de) || de.status != 422 {
		t.Errorf("isl_tokens 1.5: got %v, want a 422", err)
	}
}
