package natsplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures the embedded NATS server: what `--event-plane
// nats` runs when no server URL is given, so that one kvselect binary is
// also its own bus.
type ServerConfig struct {
	// Host and Port are the client listener; Port 0 picks a free one,
	// which Server.ClientURL then names. Default host 127.0.0.1.
	Host string
	Port int
	// ClusterHost and ClusterPort are the route listener; ClusterPort 0
	// with no Routes runs no cluster. ClusterPort -1 picks a free port.
	ClusterHost string
	ClusterPort int
	// ClusterName names the cluster (every member must agree); default
	// "kvselect".
	ClusterName string
	// Routes are the other members' route URLs (nats://host:port): the
	// servers form one cluster through NATS routes, so a message published
	// to any of them reaches subscribers of all.
	Routes []string
	// ServerName names this server in the cluster (unique); default a
	// random one.
	ServerName string
	// MaxPayload is the largest message the server accepts; default 8 MiB
	// (NATS' own default is 1 MiB, below a large KV batch).
	MaxPayload int32
	// Logger receives the server's notices and errors; nil: silent.
	Logger *slog.Logger
	// JetStream enables JetStream (the worker catalog's bucket, Catalog)
	// with its files under StoreDir (required then). Clustered, every
	// member must enable it, and its leader is elected once a majority of
	// the members are up.
	JetStream bool
	StoreDir  string
}

// DefaultMaxPayload is ServerConfig.MaxPayload's default.
const DefaultMaxPayload = 8 << 20

// Server is an embedded nats-server (github.com/nats-io/nats-server/v2),
// in this process, on its own goroutines.
type Server struct {
	s *server.Server
}

// StartServer starts the embedded server and waits until it accepts
// connections (at most 10 s).
func StartServer(cfg ServerConfig) (*Server, error) {
	opts := &server.Options{
		ServerName:            cfg.ServerName,
		Host:                  cfg.Host,
		Port:                  cfg.Port,
		NoSigs:                true,
		NoLog:                 cfg.Logger == nil,
		MaxPayload:            cfg.MaxPayload,
		DisableShortFirstPing: true,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if cfg.ClusterPort != 0 || len(cfg.Routes) > 0 {
		opts.Cluster.Name = cfg.ClusterName
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "kvselect"
		}
		opts.Cluster.Host = cfg.ClusterHost
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = opts.Host
		}
		opts.Cluster.Port = cfg.ClusterPort
		if opts.Cluster.Port == 0 {
			opts.Cluster.Port = server.RANDOM_PORT
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("%w: NATS route %q is not nats://host:port", ErrConfig, r)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if cfg.JetStream {
		if cfg.StoreDir == "" {
			return nil, fmt.Errorf("%w: JetStream needs a store directory", ErrConfig)
		}
		opts.JetStream, opts.StoreDir = true, cfg.StoreDir
		if opts.ServerName == "" && opts.Port > 0 {
			// A clustered JetStream tells members apart by name, and a
			// restarted member is the same peer under the same name.
			opts.ServerName = fmt.Sprintf("kvselect-%s-%d", opts.Host, opts.Port)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsplane: embedded NATS server: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(&slogAdapter{cfg.Logger}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("natsplane: embedded NATS server not ready after 10s")
	}
	return &Server{s: s}, nil
}

// ClientURL is the URL clients connect to (nats://host:port).
func (s *Server) ClientURL() string { return s.s.ClientURL() }

// ClusterURL is the route URL other members list in Routes, "" without a
// cluster.
func (s *Server) ClusterURL() string {
	a := s.s.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats://" + net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port))
}

// NumRoutes is the number of live routes to other members.
func (s *Server) NumRoutes() int { return s.s.NumRoutes() }

// Close shuts the server down and waits for it.
func (s *Server) Close() error {
	s.s.Shutdown()
	s.s.WaitForShutdown()
	return nil
}

// slogAdapter is the server's Logger over slog: notices at info, warnings
// and errors as such; debug and trace are off.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(string, ...any)           {}
func (a *slogAdapter) Tracef(string, ...any)           {}
