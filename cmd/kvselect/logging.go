package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
)

// Logging is configured as Dynamo configures its own
// (ai-dynamo/dynamo:lib/runtime/src/logging.rs and config.rs), so a
// deployment that already sets its variables keeps working:
//
//   - DYN_LOGGING_JSONL: a truthy value (1, true, on, yes; any case) writes
//     one JSON object per line (time, level, target, message, then the
//     line's fields); anything else, readable text.
//   - DYN_LOG: tracing's EnvFilter directives, comma-separated, default
//     "info". A bare level (trace, debug, info, warn, error, off, or 0 to 5
//     as tracing counts them: 0 off, 5 trace) sets the level;
//     target=level sets it for a target and the targets below it.
//     kvselect's targets are "kvselect" and its components
//     ("kvselect::zmqin", "kvselect::httpapi", ...; the longest matching
//     target wins), so DYN_LOG=warn,kvselect::zmqin=debug quiets all but
//     the ZMQ ingress. Directives for other targets (Dynamo's Rust crates)
//     are accepted and ignored, and an invalid one is ignored with a
//     warning, as EnvFilter's lossy parsing does.

// levelTrace is tracing's TRACE, below slog's Debug.
const levelTrace = slog.LevelDebug - 4

// levelOff disables a target.
const levelOff = slog.Level(math.MaxInt32)

// logConfig is the resolved logging environment.
type logConfig struct {
	jsonl   bool
	level   slog.Level            // the bare directive's, default info
	targets map[string]slog.Level // kvselect target -> level
	// ignored are the directives for other targets; invalid the ones that
	// do not parse. serve reports both at start-up.
	ignored, invalid []string
}

// parseLogEnv reads DYN_LOG and DYN_LOGGING_JSONL.
func parseLogEnv(env func(string) (string, bool)) logConfig {
	c := logConfig{level: slog.LevelInfo, targets: map[string]slog.Level{}}
	if s, ok := env("DYN_LOGGING_JSONL"); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "true", "on", "yes":
			c.jsonl = true
		}
	}
	s, _ := env("DYN_LOG")
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		target, lvl, hasLevel := strings.Cut(d, "=")
		if !hasLevel {
			// A bare word is a level, or else a target at every level.
			if l, ok := parseLevel(d); ok {
				c.level = l
				continue
			}
			target, lvl = d, "trace"
		}
		l, ok := parseLevel(lvl)
		if !ok || target == "" || strings.ContainsAny(target, "[]{} ") {
			c.invalid = append(c.invalid, d)
			continue
		}
		if target == "kvselect" || strings.HasPrefix(target, "kvselect::") {
			c.targets[target] = l
		} else {
			c.ignored = append(c.ignored, d)
		}
	}
	return c
}

// parseLevel parses a level as tracing's LevelFilter does: a name in any
// case, or 0 (off) to 5 (trace).
func parseLevel(s string) (slog.Level, bool) {
	switch strings.ToLower(s) {
	case "trace", "5":
		return levelTrace, true
	case "debug", "4":
		return slog.LevelDebug, true
	case "info", "3":
		return slog.LevelInfo, true
	case "warn", "2":
		return slog.LevelWarn, true
	case "error", "1":
		return slog.LevelError, true
	case "off", "0":
		return levelOff, true
	}
	return 0, false
}

// levelOf returns a target's level: the longest configured target that is
// the target or one of its parents ("a::b" is below "a"), else the bare
// level.
func (c logConfig) levelOf(target string) slog.Level {
	best, lvl := -1, c.level
	for t, l := range c.targets {
		if (target == t || strings.HasPrefix(target, t+"::")) && len(t) > best {
			best, lvl = len(t), l
		}
	}
	return lvl
}

// logs makes the loggers of one process: one output, a level per target.
type logs struct {
	cfg  logConfig
	base slog.Handler
}

// newLogs writes to w in the format cfg selects. The base handler lets
// everything through; each target's logger applies its own level.
func newLogs(w io.Writer, cfg logConfig) *logs {
	opts := &slog.HandlerOptions{Level: levelTrace, ReplaceAttr: replaceAttr(cfg.jsonl)}
	var h slog.Handler
	if cfg.jsonl {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return &logs{cfg: cfg, base: h}
}

// warnStartup logs, after a host's start-up line, the DYN_LOG directives it
// ignored as invalid and the settings it accepted but does not act on.
func warnStartup(log *slog.Logger, cfg logConfig, inactive []string) {
	for _, d := range cfg.invalid {
		log.Warn("DYN_LOG: invalid directive ignored", "directive", d)
	}
	for _, s := range inactive {
		log.Warn("accepted without effect", "setting", s)
	}
}

// logger returns the logger of target ("kvselect" or "kvselect::name").
func (l *logs) logger(target string) *slog.Logger {
	h := &levelHandler{min: l.cfg.levelOf(target), h: l.base}
	return slog.New(h).With("target", target)
}

// replaceAttr writes times as Dynamo does (UTC, microseconds), names
// levels as tracing does (TRACE below DEBUG), and, in JSON lines, calls
// the message "message".
func replaceAttr(jsonl bool) func([]string, slog.Attr) slog.Attr {
	return func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			return slog.String(slog.TimeKey, a.Value.Time().UTC().Format("2006-01-02T15:04:05.000000Z"))
		case slog.LevelKey:
			if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelDebug {
				return slog.String(slog.LevelKey, "TRACE")
			}
		case slog.MessageKey:
			if jsonl {
				a.Key = "message"
			}
		}
		return a
	}
}

// levelHandler gates a shared handler at its own level.
type levelHandler struct {
	min slog.Level
	h   slog.Handler
}

func (h *levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.h.Enabled(ctx, l)
}

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error { return h.h.Handle(ctx, r) }

func (h *levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &levelHandler{min: h.min, h: h.h.WithAttrs(as)}
}

func (h *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{min: h.min, h: h.h.WithGroup(name)}
}

// printf adapts a logger to the func(format, args...) hooks of core and
// perf, at level.
func printf(l *slog.Logger, level slog.Level) func(string, ...any) {
	return func(format string, args ...any) {
		if l.Enabled(context.Background(), level) {
			l.Log(context.Background(), level, fmt.Sprintf(format, args...))
		}
	}
}
