//go:build linux || darwin || freebsd || netbsd || openbsd

package httpapi

import "syscall"

const peekSupported = true

// peekByte peeks at most one byte without consuming it or blocking.
func peekByte(fd uintptr) (int, error) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
