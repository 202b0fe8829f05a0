package zmqtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// DebianPython is Debian's interpreter, which python3-zmq and python3-msgpack
// install into (the python3 on PATH may be another one).
const DebianPython = "/usr/bin/python3"

// RequireDebianPyzmq skips the test, loudly, when Debian's python cannot
// import zmq and msgpack; with mustRun (the caller passes true under CI,
// CI=true, where make test installs them) it fails instead, so an
// interoperability test never passes silently. The caller reads the
// environment: only cmd/kvselect's non-test files may.
func RequireDebianPyzmq(t testing.TB, mustRun bool) {
	t.Helper()
	out, err := exec.Command(DebianPython, "-c", "import zmq, msgpack").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("libzmq interop test needs %s with python3-zmq and python3-msgpack "+
		"(make test-deps installs them): %v: %s", DebianPython, err, strings.TrimSpace(string(out)))
	if mustRun {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

// PyScript starts DebianPython with args (a testdata script of the calling
// package, relative to its directory, and its arguments) and returns its
// stdin and stdout. At cleanup stdin is closed, which ends the script, and
// the script must exit 0.
func PyScript(t testing.TB, args ...string) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(DebianPython, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s: %v", args[0], err)
		}
	})
	return stdin, bufio.NewReader(stdout)
}
