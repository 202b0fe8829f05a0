package zmqin

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Logging. The ingress and the mesh log state changes an operator acts on:
// a listener's connects and disconnects, gaps, replays and their outcome,
// publisher restarts, malformed traffic; a mesh peer's connects and
// disconnects. Nothing is logged per batch or per event. Every line of one
// rank listener (or one mesh peer) goes through its logLimiter, so a
// publisher that accepts and drops connections in a loop, or sends garbage,
// costs at most Config.LogBurst lines and then one line per LogEvery,
// which carries the number of lines suppressed since the last one.

// discard is the logger of a Config without one.
var discard = slog.New(slog.DiscardHandler)

// logLimiter is a token bucket of log lines: burst tokens, one more every
// `every`, a line taking one. Safe for concurrent use (a listener's reader
// and its run goroutine both log).
type logLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time // when tokens was last refilled; zero: never
	suppressed uint64    // lines refused since the last one allowed
}

// allow takes a token at now if there is one, and then returns the lines
// suppressed since the previous allowed one (and resets that count).
func (b *logLimiter) allow(now time.Time, burst int, every time.Duration) (ok bool, suppressed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.last.IsZero():
		b.tokens, b.last = float64(burst), now
	case now.After(b.last):
		b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.last))/float64(every))
		b.last = now
	}
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// rateLogger logs through a limiter, with fixed leading attributes (the
// worker and rank, or the peer).
type rateLogger struct {
	log   *slog.Logger
	lim   logLimiter
	burst int
	every time.Duration
	// dropped counts the lines the limiter refused (Stats.LogsSuppressed).
	dropped func()
}

// logAt logs msg at level unless the level is off or the limiter refuses
// it; a line after refused ones carries "suppressed".
func (r *rateLogger) logAt(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !r.log.Enabled(ctx, level) {
		return
	}
	ok, sup := r.lim.allow(time.Now(), r.burst, r.every)
	if !ok {
		if r.dropped != nil {
			r.dropped()
		}
		return
	}
	if sup > 0 {
		args = append(args, "suppressed", sup)
	}
	r.log.Log(ctx, level, msg, args...)
}
