package perf

import (
	"bytes"
	"context"
	"net"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
)

// PprofPrefix is the path prefix Pprof serves.
const PprofPrefix = "/debug/pprof/"

// IsPprofPath reports whether path is under PprofPrefix.
func IsPprofPath(path []byte) bool { return bytes.HasPrefix(path, []byte(PprofPrefix)) }

// Pprof serves /debug/pprof/* (index, cmdline, profile, symbol, trace and
// the named profiles: heap, goroutine, mutex, block, allocs,
// threadcreate) through fasthttp's adaptor of net/http/pprof. A CPU profile
// holds its connection for ?seconds= (default 30).
func Pprof(ctx *fasthttp.RequestCtx) { pprofhandler.PprofHandler(ctx) }

// DebugServer serves Pprof, and nothing else, on a listener of its own
// (kvselect serve --debug-addr, loopback by default), so that profiling is
// never exposed on the API's port. It has no authentication: whoever
// reaches its address can profile the process.
type DebugServer struct {
	srv *fasthttp.Server
}

// NewDebugServer returns a debug server; logf, when set, receives its
// connection errors.
func NewDebugServer(logf func(format string, args ...any)) *DebugServer {
	d := &DebugServer{}
	d.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			path := ctx.Path()
			switch {
			case IsPprofPath(path):
				Pprof(ctx)
			case string(path) == "/" || string(path) == "/debug/pprof":
				ctx.Redirect(PprofPrefix, fasthttp.StatusFound)
			default:
				ctx.Error("not found: the debug listener serves "+PprofPrefix, fasthttp.StatusNotFound)
			}
		},
		Name:                  "kvselect-debug",
		NoDefaultServerHeader: true,
		// No write timeout: a CPU profile or trace answers after its
		// ?seconds=.
		Logger: printfLogger(logf),
	}
	return d
}

// Serve serves on ln until Shutdown.
func (d *DebugServer) Serve(ln net.Listener) error { return d.srv.Serve(ln) }

// Shutdown stops accepting and waits for the requests in flight (a
// profile in progress included) until ctx ends.
func (d *DebugServer) Shutdown(ctx context.Context) error { return d.srv.ShutdownWithContext(ctx) }

type printfLogger func(format string, args ...any)

func (f printfLogger) Printf(format string, args ...any) {
	if f != nil {
		f(format, args...)
	}
}
