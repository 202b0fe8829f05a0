// Package jsonscan is a hand-written, zero-copy JSON reader for request
// bodies that must be decoded the way serde_json (and serde's derived
// Deserialize) decodes them, at no allocation on the common path.
//
// A Scanner reads one document; the caller drives it field by field
// (Object, Array and the scalar readers), so there is no reflection and no
// intermediate tree. What it guarantees:
//
//   - Grammar: RFC 8259, no extensions, a recursion limit of 128 for
//     skipped values, nothing but whitespace after the top-level value.
//   - Errors worded as serde_json's Display, byte for byte: the message,
//     then " at line L column C" at the offset where serde_json reports it
//     (a type error after the offending value, a duplicate field after its
//     key, a missing field at the end of its object). A field path
//     ("pinned_worker.worker_id: ") prefixes a data error inside a struct,
//     as serde_path_to_error does. Every error is an *Error whose Class
//     tells a syntax error (not JSON, serde's Category::Syntax and Eof)
//     from a data error (JSON of the wrong shape, Category::Data); mapping
//     a class to an answer (a status code, a prefix) is the caller's.
//   - Exact keys: a key matches a field name byte for byte (serde is
//     case-sensitive, unlike encoding/json and go-json); a FieldSet tells
//     known keys from unknown ones, which the caller skips.
//   - A known field given twice is serde's data error "duplicate field
//     `x`" (where encoding/json keeps the last value).
//   - UTF-8: every string, keys and skipped values included, must be valid
//     UTF-8 after unescaping; \u escapes must pair surrogates. A string
//     that is not is serde's "invalid unicode code point" (where the
//     standard library substitutes U+FFFD).
//   - Numbers as serde reads them: a leading zero is a syntax error, -0 is
//     the float -0.0 (a data error where an integer is expected), a number
//     beyond f64's range is "number out of range" (a syntax error) whatever
//     the target type; a skipped number is checked for its syntax only, as
//     serde_json ignores a value.
//   - Zero allocation: strings without escapes alias the input, strings
//     with escapes are unescaped into the Scanner's own buffer (reused
//     across Reset), integer arrays are appended to the caller's slices,
//     and the callbacks of Object and Array do not escape. Only errors
//     allocate. A string returned by Str is valid while the input and the
//     Scanner are neither modified nor reused; a caller that keeps one
//     copies it.
//   - Bounded echoes: an error quotes at most MaxEcho bytes of the input.
//
// The arrays of integers have a fast path (up to 19 digits without a
// leading zero, read from 8-byte words: fastints.go) that falls back to
// the exact generic reader on any other shape, so the fast path never
// changes a result or an error.
package jsonscan
