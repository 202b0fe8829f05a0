package zmtp

import (
	"os"
	"testing"

	"github.com/kvselect/kvselect/zmqin/internal/zmqtest"
)

// The shared test helpers of zmqin/internal/zmqtest under this package's
// names: the frame encoders of the raw ZMTP peer, the waits, the libzmq
// interop harness.

var (
	rawReady       = zmqtest.Ready
	rawCommand     = zmqtest.Command
	rawFrame       = zmqtest.Frame
	rawFrameHeader = zmqtest.FrameHeader
	rawMsg         = zmqtest.Msg
	cat            = zmqtest.Cat
	waitFor        = zmqtest.WaitFor
	checkNoLeak    = zmqtest.CheckNoLeak
	pyScript       = zmqtest.PyScript
)

// requireDebianPyzmq skips a libzmq interop test without Debian's pyzmq,
// and fails it instead under CI (CI=true).
func requireDebianPyzmq(t *testing.T) { zmqtest.RequireDebianPyzmq(t, os.Getenv("CI") == "true") }
