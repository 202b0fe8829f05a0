//go:build race

package httpapi

// raceEnabled: allocation counts are meaningless under -race (sync.Pool
// drops items at random and the instrumentation allocates).
const raceEnabled = true
