package httpapi

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// AccessLog is the standalone indexer's access log (--access-log), as the
// reference writes it (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/
// logging.rs): one JSON object per request and line,
//
//	{"ts":"2026-12-01T21:50:31.919Z","trace_id":"-","method":"POST",
//	 "path":"/query","model":"m","status":200,"duration_ms":0.21}
//
// ts is RFC 3339 with milliseconds, UTC (Z) or local time with its offset;
// trace_id is the trace-id header's value, "-" without one; path the
// matched route ("unknown" when none matched); model the request's
// model_name where the route has one, else "-". POST /reopen_logs reopens
// the file (after a rotation). Lines go through a 64 KiB buffer, flushed
// when full, every FlushInterval, on Reopen and on Close: memory stays
// bounded, and a write error is counted (Stats) rather than fail a
// request. Safe for concurrent use.
type AccessLog struct {
	path        string
	traceHeader string
	local       bool

	mu struct {
		sync.Mutex
		f      *os.File
		w      *bufio.Writer
		line   []byte // scratch
		errors uint64
		closed bool
	}
	stop chan struct{}
	done chan struct{}
}

// FlushInterval is how long a written line waits in the buffer at most.
const FlushInterval = time.Second

// accessLogBuffer is the write buffer's size.
const accessLogBuffer = 64 << 10

// NewAccessLog opens (creating, appending) path. traceHeader is the
// header whose value is the line's trace_id; it must be a valid header
// name. localTime writes local timestamps instead of UTC.
func NewAccessLog(path, traceHeader string, localTime bool) (*AccessLog, error) {
	if !validHeaderName(traceHeader) {
		return nil, errors.New("invalid --trace-id-header '" + traceHeader + "': invalid HTTP header name")
	}
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	a := &AccessLog{path: path, traceHeader: traceHeader, local: localTime, stop: make(chan struct{}), done: make(chan struct{})}
	a.mu.f, a.mu.w = f, bufio.NewWriterSize(f, accessLogBuffer)
	go a.flusher()
	return a, nil
}

func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c < 0x80 && (c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' || c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~'):
		default:
			return false
		}
	}
	return true
}

func (a *AccessLog) flusher() {
	defer close(a.done)
	t := time.NewTicker(FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.mu.Lock()
			if !a.mu.closed {
				a.flushLocked()
			}
			a.mu.Unlock()
		}
	}
}

func (a *AccessLog) flushLocked() {
	if err := a.mu.w.Flush(); err != nil {
		a.mu.errors++
		a.mu.w.Reset(a.mu.f) // drop what could not be written
	}
}

// Reopen flushes and closes the file and opens path again.
func (a *AccessLog) Reopen() error {
	f, err := openAppend(a.path)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.closed {
		_ = f.Close()
		return errors.New("access log closed")
	}
	a.flushLocked()
	_ = a.mu.f.Close()
	a.mu.f = f
	a.mu.w.Reset(f)
	return nil
}

// Close flushes and closes the file.
func (a *AccessLog) Close() error {
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		return nil
	}
	a.mu.closed = true
	a.flushLocked()
	err := a.mu.f.Close()
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	return err
}

// WriteErrors is the count of failed writes to the file.
func (a *AccessLog) WriteErrors() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.errors
}

// accessModel is the RequestCtx user value a handler records its request's
// model_name under, for the access log (setModel).
const accessModel = "kvselect.access_model"

// setModel records model as the request's model for the access log, when
// there is one (the value costs an allocation, so only then).
func (s *Server) setModel(ctx *fasthttp.RequestCtx, model string) {
	if s.cfg.AccessLog != nil {
		ctx.SetUserValue(accessModel, model)
	}
}

// logAccess writes the access-log line of a request of route r.
func (s *Server) logAccess(ctx *fasthttp.RequestCtx, r int, start time.Time) {
	path := "unknown"
	if name := s.table.names[r]; strings.HasPrefix(name, "GET /") || strings.HasPrefix(name, "POST /") {
		_, path, _ = strings.Cut(name, " ")
	}
	model, _ := ctx.UserValue(accessModel).(string)
	if model == "" {
		model = "-"
	}
	s.cfg.AccessLog.log(ctx, path, model, start)
}

// log writes the line of one request that started at start.
func (a *AccessLog) log(ctx *fasthttp.RequestCtx, path, model string, start time.Time) {
	now := time.Now()
	trace := ctx.Request.Header.Peek(a.traceHeader)
	ts := start
	if !a.local {
		ts = ts.UTC()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.closed {
		return
	}
	b := a.mu.line[:0]
	b = append(b, `{"ts":"`...)
	if a.local {
		b = ts.AppendFormat(b, "2006-01-02T15:04:05.000-07:00")
	} else {
		b = ts.AppendFormat(b, "2006-01-02T15:04:05.000Z")
	}
	b = append(b, `","trace_id":`...)
	if len(trace) == 0 {
		b = append(b, `"-"`...)
	} else {
		b = appendString(b, b2s(trace))
	}
	b = append(b, `,"method":`...)
	b = appendString(b, b2s(ctx.Method()))
	b = append(b, `,"path":`...)
	b = appendString(b, path)
	b = append(b, `,"model":`...)
	b = appendString(b, model)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(ctx.Response.StatusCode()), 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(now.Sub(start))/float64(time.Millisecond), 'f', -1, 64)
	b = append(b, "}\n"...)
	a.mu.line = b
	if _, err := a.mu.w.Write(b); err != nil {
		a.mu.errors++
		a.mu.w.Reset(a.mu.f)
	}
}
