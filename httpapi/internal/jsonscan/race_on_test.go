//go:build race

package jsonscan

// raceEnabled: allocation counts are meaningless under -race (the
// instrumentation allocates).
const raceEnabled = true
