// Package ratelog rate-limits the log lines of one source: a KV-event rank
// listener (package zmqin) or a replica mesh peer (package zmqin/mesh).
// Each source logs through its own Logger, a token bucket of lines, so a
// publisher or peer that flaps or sends garbage costs at most Burst lines
// and then one per Every; the next line allowed carries the number
// suppressed since the one before ("suppressed").
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter is a token bucket of log lines: burst tokens, one more every
// `every`, a line taking one. Safe for concurrent use (a listener's reader
// and its run goroutine both log). The zero Limiter is ready.
type Limiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time // when tokens was last refilled; zero: never
	suppressed uint64    // lines refused since the last one allowed
}

// Allow takes a token at now if there is one, and then returns the lines
// suppressed since the previous allowed one (and resets that count).
func (b *Limiter) Allow(now time.Time, burst int, every time.Duration) (ok bool, suppressed uint64) {
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

// Logger logs through a Limiter, with fixed leading attributes (the
// worker and rank, or the peer) carried by Log.
type Logger struct {
	Log   *slog.Logger
	Lim   Limiter
	Burst int
	Every time.Duration
	// Dropped, when set, is called for each line the limiter refused
	// (zmqin's Stats.LogsSuppressed).
	Dropped func()
}

// LogAt logs msg at level unless the level is off or the limiter refuses
// it; a line after refused ones carries "suppressed".
func (r *Logger) LogAt(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !r.Log.Enabled(ctx, level) {
		return
	}
	ok, sup := r.Lim.Allow(time.Now(), r.Burst, r.Every)
	if !ok {
		if r.Dropped != nil {
			r.Dropped()
		}
		return
	}
	if sup > 0 {
		args = append(args, "suppressed", sup)
	}
	r.Log.Log(ctx, level, msg, args...)
}
