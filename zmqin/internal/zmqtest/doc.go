// Package zmqtest holds the test helpers that the tests of the zmqin
// packages share (zmqin, zmqin/zmtp, zmqin/mesh): RawPeer, a ZMTP peer
// written byte by byte that shares no code with the transport under test,
// and the frame encoders it sends with; WaitFor and CheckNoLeak; and the
// libzmq interop harness (RequireDebianPyzmq, PyScript) that runs the
// python scripts of a package's testdata. Only test files import it.
package zmqtest
