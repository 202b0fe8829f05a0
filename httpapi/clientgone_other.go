//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package httpapi

// No non-consuming peek here: a waiting request is not cancelled when its
// client goes away (it waits until dispatched or the service closes).
const peekSupported = false

func peekByte(uintptr) (int, error) { return 0, nil }
