package httpapi

import "unsafe"

// b2s views b as a string without copying. The string is valid only while
// b is: use it for lookups and calls that copy what they keep.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
