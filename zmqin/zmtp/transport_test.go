package zmtp

import (
	"errors"
	"testing"
)

// TestParseEndpoint: the endpoints a listener can dial (tcp:// with a
// host or a wildcard, IPv6 in brackets, ipc://) parse; the rest fail with
// ErrEndpoint.
func TestParseEndpoint(t *testing.T) {
	for _, ep := range []string{"", "tcp://", "tcp://host", "inproc://x", "udp://1.2.3.4:5"} {
		if _, err := ParseEndpoint(ep); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		} else if !errors.Is(err, ErrEndpoint) {
			t.Errorf("endpoint %q: %v does not wrap ErrEndpoint", ep, err)
		}
	}
	for _, ep := range []string{"tcp://*:5557", "tcp://127.0.0.1:5557", "tcp://[::1]:5557", "ipc:///tmp/x"} {
		if _, err := ParseEndpoint(ep); err != nil {
			t.Errorf("endpoint %q: %v", ep, err)
		}
	}
}
