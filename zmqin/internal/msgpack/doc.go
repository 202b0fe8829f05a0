// Package msgpack holds the msgpack primitives that kvselect's two msgpack
// wire formats share: the KV event batches of vLLM and SGLang (package
// zmqin decodes and encodes them) and the replica-sync envelopes of the
// selector mesh (package zmqin/mesh). It knows neither format.
//
// Reader (reader.go) is a cursor over one untrusted document: it never
// allocates, never reads past its bytes, and checks every declared length
// against the bytes left before returning it, so no caller can size an
// allocation from a header alone. Its structural errors wrap ErrMalformed;
// ErrType reports, consuming nothing, a well-formed value of another type
// than asked for. The Append functions (writer.go) write values in their
// smallest encoding, as msgspec and rmp_serde do.
package msgpack
