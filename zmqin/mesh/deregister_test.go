package mesh

import (
	"errors"
	"testing"

	"github.com/kvselect/kvselect/core"
)

// TestDeregisterValidates: the reference's deregister_peer validates
// the endpoint first (InvalidEndpoint: 400 with validate_endpoint's text);
// only a valid unknown endpoint is 404 "peer not found".
func TestDeregisterValidates(t *testing.T) {
	r := newBareReplica(t, Config{})
	err := r.mesh.Deregister("not-an-endpoint")
	if !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("deregister of an invalid endpoint: %v (class %v), want bad request %q", err, core.ClassOf(err), ValidatePeer("not-an-endpoint"))
	}
}
