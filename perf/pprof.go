package perf

import (
	"bytes"

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
// holds its connection for ?seconds= (default 30): the server's
// WriteTimeout must exceed it.
func Pprof(ctx *fasthttp.RequestCtx) { pprofhandler.PprofHandler(ctx) }
