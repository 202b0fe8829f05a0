package zmqin

import "log/slog"

// Logging. The ingress logs state changes an operator acts on: a
// listener's connects and disconnects, gaps, replays and their outcome,
// publisher restarts, malformed traffic. Nothing is logged per batch or
// per event. Every line of one rank listener goes through its own rate
// limiter (zmqin/internal/ratelog, as a mesh peer's do), so a publisher
// that accepts and drops connections in a loop, or sends garbage, costs at
// most Config.LogBurst lines and then one line per LogEvery, which carries
// the number of lines suppressed since the last one.

// discard is the logger of a Config without one.
var discard = slog.New(slog.DiscardHandler)
