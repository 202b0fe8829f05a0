package mesh

import (
	"os"
	"testing"

	"github.com/kvselect/kvselect/zmqin/internal/zmqtest"
)

// The shared test helpers of zmqin/internal/zmqtest under this package's
// names: the raw ZMTP peer, the waits, the libzmq interop harness.

var (
	newRawPeer     = zmqtest.NewRawPeer
	rawFrameHeader = zmqtest.FrameHeader
	waitFor        = zmqtest.WaitFor
	checkNoLeak    = zmqtest.CheckNoLeak
	pyScript       = zmqtest.PyScript
)

// requireDebianPyzmq skips a libzmq interop test without Debian's pyzmq,
// and fails it instead under CI (CI=true).
func requireDebianPyzmq(t *testing.T) { zmqtest.RequireDebianPyzmq(t, os.Getenv("CI") == "true") }
