package zmqin

import (
	"os"
	"testing"

	"github.com/kvselect/kvselect/zmqin/internal/zmqtest"
)

// The shared test helpers of zmqin/internal/zmqtest under this package's
// names: the raw ZMTP peer and its frame encoders, the waits, the libzmq
// interop harness.

type (
	rawPeer = zmqtest.RawPeer
	rawConn = zmqtest.RawConn
)

var (
	newRawPeer     = zmqtest.NewRawPeer
	newRawPeerType = zmqtest.NewRawPeerType
	rawFrame       = zmqtest.Frame
	rawFrameHeader = zmqtest.FrameHeader
	rawMsg         = zmqtest.Msg
	rawLive        = zmqtest.Live
	cat            = zmqtest.Cat
	waitFor        = zmqtest.WaitFor
	checkNoLeak    = zmqtest.CheckNoLeak
	pyScript       = zmqtest.PyScript
)

// requireDebianPyzmq skips a libzmq interop test without Debian's pyzmq,
// and fails it instead under CI (CI=true).
func requireDebianPyzmq(t *testing.T) { zmqtest.RequireDebianPyzmq(t, os.Getenv("CI") == "true") }
