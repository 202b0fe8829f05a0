package httpapi

import (
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/valyala/fasthttp"
)

// Server is the HTTP front end of a core.Service (New) or of a
// core.Indexer (NewIndexer): one server machinery (connections, drain,
// auth, metrics) with one route table per kind.
type Server struct {
	svc    *core.Service
	ix     *core.Indexer
	table  *routeTable
	cfg    Config
	srv    *fasthttp.Server
	reg    *perf.Registry
	routes []*perf.Route // by route id of table
	conns  *connTracker
	// auth is set with Config.AuthToken; authSum is the token's SHA-256.
	auth    bool
	authSum [32]byte

	// draining is set by Shutdown: requests get 503 and close their
	// connection.
	draining atomic.Bool
	lnMu     sync.Mutex  // protects lns
	lns      []*listener // every listener Serve was given, for Shutdown

	selectPool  sync.Pool // *selectReq
	reservePool sync.Pool // *reserveReq
	disaggPool  sync.Pool // *disaggReq
	bufPool     sync.Pool // *[]byte
}

// routeTable is one kind of server: its routes' metric names, its
// dispatch, and the ids Handle observes for the requests it answers
// before dispatching.
type routeTable struct {
	names                  []string
	dispatch               func(s *Server, ctx *fasthttp.RequestCtx) int
	draining, unauthorized int
	// drainBody answers requests that arrive while the server drains.
	drainBody []byte
	stats     func(s *Server, w io.Writer)
	// descs describe the families stats writes.
	descs []perf.Desc
}

var selectorRoutes = routeTable{
	names: routeNames[:], dispatch: (*Server).dispatch, draining: rDraining, unauthorized: rUnauthorized,
	drainBody: errShuttingDown, stats: (*Server).writeStats, descs: slices.Concat(statsDescs, sessionDescs, dynamoDescs),
}

// New returns a server for svc. It registers its metrics on a registry of
// its own (Registry).
func New(svc *core.Service, cfg Config) (*Server, error) {
	s, err := newServer(cfg, &selectorRoutes)
	if err != nil {
		return nil, err
	}
	s.svc = svc
	return s, nil
}

func newServer(cfg Config, table *routeTable) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	to, hasTimeouts := newTimeouts(cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout)
	s := &Server{table: table, cfg: cfg, reg: perf.NewRegistry(),
		conns: newConnTracker(cfg.MaxConnections, cfg.TLS != nil, to, hasTimeouts)}
	if len(cfg.AuthToken) > 0 {
		s.auth, s.authSum = true, sha256.Sum256(cfg.AuthToken)
		s.cfg.AuthToken = nil
	}
	s.routes = make([]*perf.Route, len(table.names))
	for i := range s.routes {
		s.routes[i] = s.reg.Route(table.names[i])
	}
	s.reg.Describe(table.descs...)
	s.reg.OnScrape(func(w io.Writer) { table.stats(s, w) })
	if len(cfg.Tokenizers) > 0 {
		s.reg.Describe(tokenizerDescs...)
		s.reg.OnScrape(s.writeTokenizerStats)
	}
	s.selectPool.New = func() any { return new(selectReq) }
	s.reservePool.New = func() any { return new(reserveReq) }
	s.disaggPool.New = func() any { return new(disaggReq) }
	s.bufPool.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.srv = &fasthttp.Server{
		Handler:            s.Handle,
		ErrorHandler:       s.handleError,
		Name:               "kvselect",
		MaxRequestBodySize: cfg.MaxRequestBodySize,
		// The connection tracker enforces cfg's Read, Write and
		// IdleTimeout (timeouts.go): fasthttp's own would set three
		// socket deadlines a request.
		Concurrency: fasthttpConcurrency(cfg.MaxConnections),
		ConnState:   s.connState,
		// A selection's response echoes its sequence_hashes: 5.6 KB for
		// a 274-block prompt, 12 KB for the Mooncake trace's mean of 612.
		// fasthttp's 4 KiB writer sent such a response in two write
		// syscalls; 16 KiB sends prompts up to about 800 blocks in one.
		WriteBufferSize:               16 << 10,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		Logger:                        fasthttpLogger{cfg.Logger},
		// Request headers (the Authorization token among them) stay out
		// of fasthttp's error logs.
		SecureErrorLogMessage: true,
	}
	if cfg.TLS != nil {
		s.srv.TLSConfig = cfg.TLS.Clone()
	}
	return s, nil
}

// Registry returns the server's metric registry.
func (s *Server) Registry() *perf.Registry { return s.reg }

// Serve serves HTTP on ln until Shutdown, through the connection cap and
// accept retries of conns.go.
func (s *Server) Serve(ln net.Listener) error {
	l := newListener(ln, s.conns, s.cfg.Logger)
	s.lnMu.Lock()
	s.lns = append(s.lns, l)
	s.lnMu.Unlock()
	if s.draining.Load() {
		_ = l.Close()
	}
	if s.srv.TLSConfig != nil {
		return s.srv.ServeTLS(l, "", "") // the certificate is in TLSConfig
	}
	return s.srv.Serve(l)
}

// fasthttpConcurrency is fasthttp's Server.Concurrency for a connection cap:
// far enough above it that fasthttp's own text/plain 503 never fires (a
// closed connection leaves the cap before its fasthttp worker is free); 0,
// fasthttp's default, without a cap.
func fasthttpConcurrency(maxConns int) int {
	if maxConns == 0 {
		return 0
	}
	return 2*maxConns + 64
}

// connState records fasthttp's state of a connection for the drain.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = tc.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	tc.state.Store(int32(st))
	tc.stamp()
	if st == fasthttp.StateActive {
		tc.requests.Add(1)
	}
}

// handleError answers what fasthttp rejects before the handler: a body over
// the limit (413) and malformed requests (400), as JSON.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	status, msg := fasthttp.StatusBadRequest, "Failed to read the request: "+err.Error()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		status, msg = fasthttp.StatusRequestEntityTooLarge, "Failed to buffer the request body: length limit exceeded"
	}
	if s.ix != nil {
		writeText(ctx, status, msg) // the indexer's rejections are plain text
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(appendError(nil, msg))
}

// Handle is the fasthttp handler: dispatch, then per-route metrics. While
// the server drains (Shutdown), a request is answered 503 unless it
// started before, and every response closes its connection. With
// Config.AuthToken, a request without the token is answered 401 before
// routing (auth.go).
//
// A request's latency starts at ctx.Time(), the clock fasthttp's server
// reads just before it calls the handler, so that Handle reads the clock
// once (time.Since), not three times (time.Now is two reads): 1.2 µs of
// BenchmarkLifecycle's six calls were the clock. A RequestCtx that no
// server filled (tests calling Handle) has a zero time; Handle reads the
// clock then.
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	start := ctx.Time()
	if start.IsZero() {
		start = time.Now()
	}
	var r int
	switch {
	case s.draining.Load():
		r = s.table.draining
		s.writeRaw(ctx, fasthttp.StatusServiceUnavailable, s.table.drainBody)
	case s.auth && !authExempt(ctx.Path()) && !s.authorized(ctx):
		r = s.table.unauthorized
		s.unauthorized(ctx)
	default:
		r = s.table.dispatch(s, ctx)
	}
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
	s.routes[r].Observe(ctx.Response.StatusCode(), time.Since(start))
	if s.cfg.AccessLog != nil {
		s.logAccess(ctx, r, start)
	}
}
