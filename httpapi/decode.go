package httpapi

import (
	"errors"

	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
)

// Every JSON body is read by jsonscan (httpapi/internal/jsonscan), a
// hand-written scanner for the selection bodies, whose cost is dominated
// by two arrays of up to thousands of i64 hashes, and for every other
// body, so every route has serde's grammar and texts.
//
// Why not go-json for these bodies: go-json v0.12.0 copies the input into
// its own buffer and makes every decoded string a copy, and a custom
// UnmarshalJSON (needed to tell an absent array from an empty one while
// reusing a pooled slice) costs one more copy and allocation per field.
// Measured on the 128+128-hash body (5.3 KB) with
// BenchmarkDecodeSelectPaired, which alternates both decoders in one loop
// on this shared 2-core machine: go-json 16.6-20.8 µs and 3 allocs, the
// scanner 11.8-15.3 µs and 0 allocs (1.25-1.7x). The generic path alone
// (one digit at a time) was 2.3x slower than go-json: the scanner's array
// fast path is what makes the difference.
//
// Strings without escapes alias the input (the fasthttp request body):
// they are valid until the handler returns, and core copies what it keeps.
// Strings with escapes are decoded into the scanner's buffer, owned by the
// pooled request.
//
// The scanner's errors are serde_json's; bodyErr words them as axum's Json
// extractor does: syntax errors are 400, data errors 422.

// decodeError is a body that cannot be decoded: status 400 (syntax) or 422
// (data: wrong type, missing field), with axum's text, or a 400 of a
// decoder's own validation.
type decodeError struct {
	status int
	msg    string
}

func (e *decodeError) Error() string { return e.msg }

// The prefixes of axum's JsonSyntaxError and JsonDataError rejections.
const (
	syntaxPrefix = "Failed to parse the request body as JSON: "
	dataPrefix   = "Failed to deserialize the JSON body into the target type: "
)

// bodyErr returns err, an error of a body's decoder, as the answer to the
// request: a scanner error becomes axum's rejection (a *decodeError);
// nil and other errors are returned as they are.
func bodyErr(err error) error {
	if err == nil {
		return nil
	}
	return rejection(err)
}

func rejection(err error) error {
	var se *jsonscan.Error
	if !errors.As(err, &se) {
		return err
	}
	if se.Class == jsonscan.Syntax {
		return &decodeError{400, syntaxPrefix + se.Msg}
	}
	return &decodeError{422, dataPrefix + se.Msg}
}
