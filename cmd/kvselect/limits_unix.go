//go:build unix

package main

import "syscall"

// openFileLimit returns the soft RLIMIT_NOFILE (as the Go runtime left it:
// it raises the soft limit to the hard one at start-up), 0 if unknown.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
