//go:build unix

package httpapi

import (
	"net"
	"syscall"
)

// pendingInput reports whether c's socket holds bytes the server has not
// read (a request the client already sent): a non-blocking MSG_PEEK. A
// closed peer (0 bytes) or an error is no input.
func pendingInput(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
