//go:build !race

package zmqin

const raceEnabled = false
