package zmqin

import "log/slog"

// Logging. The ingress and the mesh log state changes an operator acts on:
// a listener's connects and disconnects, gaps, replays and their outcome,
// publisher restarts, malformed traffic; a mesh peer's connects and
// disconnects. Nothing is logged per batch or per event. Every line of one
// rank listener (or one mesh peer) goes through its own rate limiter
// (zmqin/internal/ratelog), so a publisher that accepts and drops
// connections in a loop, or sends garbage, costs at most Config.LogBurst
// lines and then one line per LogEvery, which carries the number of lines
// suppressed since the last one.

// discard is the logger of a Config without one.
var discard = slog.New(slog.DiscardHandler)
