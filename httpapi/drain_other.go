//go:build !unix

package httpapi

import "net"

// pendingInput cannot peek off Unix: the drain relies on drainLooks alone.
func pendingInput(net.Conn) bool { return false }
