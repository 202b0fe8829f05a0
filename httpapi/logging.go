package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kvselect/kvselect/core"
)

// LogCatalogChange logs one catalog change as one line at info level
// (warn when the worker is left not schedulable): "worker <op>" with the
// source of the change (e.g. "http", "--workers-file"), the worker's
// identity, partition, lifecycle, endpoint, data-parallel ranks and the
// reasons it is not schedulable. A nil logger logs nothing.
func LogCatalogChange(l *slog.Logger, source, op string, rec core.WorkerRecord) {
	if l == nil {
		return
	}
	level := slog.LevelInfo
	args := []any{"source", source, "worker_id", rec.WorkerID, "model_name", rec.ModelName, "routing_group", rec.RoutingGroup, "lifecycle", string(rec.Lifecycle)}
	if rec.Endpoint != nil {
		args = append(args, "endpoint", *rec.Endpoint)
	}
	if rec.DataParallelSize != nil {
		start := uint32(0)
		if rec.DataParallelStartRank != nil {
			start = *rec.DataParallelStartRank
		}
		args = append(args, "dp_start_rank", start, "dp_size", *rec.DataParallelSize)
	}
	if len(rec.NotSchedulableReasons) > 0 {
		args = append(args, "reasons", strings.Join(rec.NotSchedulableReasons, "; "))
		if op != "removed" {
			level = slog.LevelWarn
		}
	}
	l.Log(context.Background(), level, "worker "+op, args...)
}

// fasthttpLogger adapts fasthttp's Printf logger (its errors while
// serving a connection) to slog, at warn level.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Warn("http: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}
