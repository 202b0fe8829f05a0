package httpapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/core/text"
)

// DefaultMaxRequestBodySize is the reference's REQUEST_BODY_LIMIT_BYTES.
const DefaultMaxRequestBodySize = 8 << 20

// Config configures a Server.
type Config struct {
	// MaxRequestBodySize is the body limit of every route; larger bodies
	// get 413. > 0.
	MaxRequestBodySize int
	// ReadTimeout, WriteTimeout and IdleTimeout bound one connection.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConnections caps the open connections, so that idle clients cannot
	// take every descriptor of the process; a connection over the cap is
	// answered 503 {"error": ...} with Connection: close (closed unanswered
	// under TLS) and counted in kvselect_http_connections_rejected_total.
	// 0 is no cap (fasthttp's own limit of 256 Ki then applies).
	MaxConnections int
	// AuthToken, when set, is the bearer token every route but /health,
	// /ready and /metrics requires (Authorization: Bearer <token>); a
	// request without it gets 401 {"error": ...} with WWW-Authenticate:
	// Bearer. The server keeps only its SHA-256 and never logs it.
	AuthToken []byte
	// TLS, when set, serves HTTPS through fasthttp's TLS support; it must
	// hold a certificate. Connections over MaxConnections are then closed
	// unanswered (their handshake has not run).
	TLS *tls.Config
	// Peers manages replica-sync peers; nil answers as a selector started
	// without --replica-sync-port.
	Peers Peers
	// Logger receives the server's errors (accept retries, fasthttp's
	// connection errors) and one line per catalog change made over HTTP
	// (LogCatalogChange); nil discards them.
	Logger *slog.Logger
	// Tokenizers are the models' tokenizers by model name (--model-path):
	// POST /tokenize and /detokenize use them. nil: none.
	Tokenizers map[string]*text.Tokenizer
	// IndexerTestEndpoints mounts the standalone indexer's listener-control
	// test routes, POST /test/pause_listener and /test/resume_listener
	// (DYN_KV_INDEXER_TEST_ENDPOINTS); never in production.
	IndexerTestEndpoints bool
	// ReadyCheck, when set, is the host's own readiness, asked by GET
	// /ready beside the service's: a non-nil error makes it answer 503
	// with ready false and the error's text as not_ready_reason (the
	// EPP's Kubernetes discovery before its informers synced). It is
	// called on the request path and must not block.
	ReadyCheck func() error
	// EngineLoads, when set, returns what the host's engine scrape last
	// read of a worker (ok false: nothing yet), shown in GET /loads as
	// each row's "engine" (engineload.go). Called on the request path,
	// once per row; it must not block.
	EngineLoads func(workerID uint64) (load EngineLoad, ok bool)
	// AccessLog, when set, receives one line per request (the standalone
	// indexer's --access-log; the selector has none, as the reference's).
	// The server does not close it.
	AccessLog *AccessLog
}

// DefaultConfig returns the defaults: 8 MiB bodies, 60 s
// read/idle and 120 s write timeouts.
func DefaultConfig() Config {
	return Config{
		MaxRequestBodySize: DefaultMaxRequestBodySize,
		ReadTimeout:        60 * time.Second,
		WriteTimeout:       120 * time.Second,
		IdleTimeout:        60 * time.Second,
	}
}

// Validate reports an invalid Config.
func (c *Config) Validate() error {
	if c.MaxRequestBodySize <= 0 {
		return fmt.Errorf("httpapi: max request body size must be > 0, got %d", c.MaxRequestBodySize)
	}
	if c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.MaxConnections < 0 {
		return errors.New("httpapi: timeouts and max connections must be >= 0")
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		return errors.New("httpapi: the TLS config has no certificate")
	}
	return nil
}

// Peers is the replica-sync peer manager behind /replica_sync/*.
type Peers interface {
	// Register adds a peer endpoint; added is false when already present.
	// An invalid endpoint is an error wrapping core.ErrBadRequest.
	Register(endpoint string) (added bool, err error)
	// Deregister removes a peer; a core.ErrNotFound error when unknown.
	Deregister(endpoint string) error
	// List returns the sorted endpoints.
	List() []string
}
