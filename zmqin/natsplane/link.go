package natsplane

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Link is the event plane's one client connection to NATS and what is known
// of its state: whether it is up, since when, and how often it went down
// and came back. It owns the connection's state handlers; OnReconnect
// callbacks are how the plane's parts re-synchronise after a partition.
//
// Partition behaviour: nats.go retries forever (MaxReconnects -1), and
// while it is down publishes go to its bounded reconnect buffer (8 MiB;
// past it they fail, Stats' PublishErrors). Nothing of selection waits for
// the link: the booking paths only queue (Bookings.Publish), the KV
// subscriptions just stop delivering. On reconnect nats.go re-subscribes
// by itself, and the Link runs the OnReconnect callbacks on a goroutine of
// its own (never on nats.go's callback goroutine, which delivers the
// subscriptions' state changes as well).
type Link struct {
	nc *nats.Conn

	disconnects, reconnects atomic.Uint64
	// mu owns the state the handlers write and Status reads.
	mu struct {
		sync.Mutex
		connected bool
		since     time.Time // the last change of connected
		lastErr   string
		onRe      []func()
	}
	// kick wakes the callback goroutine (capacity 1: reconnects that
	// come while it runs the callbacks coalesce into one more run).
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// LinkStatus is a Link's state, for /ready and metrics.
type LinkStatus struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
	// Since is when the link last went up or down (RFC 3339).
	Since       string `json:"since"`
	Disconnects uint64 `json:"disconnects"`
	Reconnects  uint64 `json:"reconnects"`
	LastError   string `json:"last_error,omitempty"`
}

// Dial opens the event plane's connection to url: retrying forever on
// disconnection (a replica cut off from the bus keeps selecting on its own
// view), with the reconnect buffer bounded so a publisher never holds more
// than 8 MiB while disconnected. name labels the connection on the server.
// A first connection that fails is retried in the background
// (RetryOnFailedConnect): Dial returns with the link down.
func Dial(url, name string, log *slog.Logger) (*Link, error) { return dialLink(url, name, log) }

// DialInProcess is Dial to this process's embedded server over an
// in-process pipe (nats.InProcessServer) instead of loopback TCP: two
// fewer socket hops, each a wake-up through the network poller behind
// every runnable goroutine. In `kvselect bench --replicas 3 --event-plane
// nats` at C1024 (load average 5 to 7), TCP to the own server gave a
// booking-to-peer lag p50 of 45 ms, p99 262 ms.
func DialInProcess(srv *Server, name string, log *slog.Logger) (*Link, error) {
	return dialLink(srv.ClientURL(), name, log, nats.InProcessServer(srv.s))
}

func dialLink(url, name string, log *slog.Logger, extra ...nats.Option) (*Link, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Link{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.mu.since = time.Now()
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(8 << 20),
		nats.RetryOnFailedConnect(true),
		// What this connection publishes is not delivered back to its own
		// subscriptions: each replica would otherwise receive, decode and
		// skip its every booking (half of what a replica of three
		// received in `kvselect bench --replicas 3 --event-plane nats`).
		// Bookings still skip their own router_id.
		nats.NoEcho(),
		nats.ConnectHandler(func(*nats.Conn) { l.up(false) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS event plane: disconnected; selecting on this replica's own view until it is back", "err", err)
			l.down(err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS event plane: reconnected; re-synchronising", "url", c.ConnectedUrlRedacted())
			l.up(true)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			// Slow consumers are counted by the subscription
			// (Stats.SlowConsumerDrops) and show as gaps.
			log.Warn("NATS event plane: async error", "subject", subj, "err", err)
		}),
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	l.nc = nc
	if nc.IsConnected() {
		l.up(false)
	}
	go l.run()
	return l, nil
}

// Conn is the connection.
func (l *Link) Conn() *nats.Conn { return l.nc }

// IsConnected reports whether the link is up.
func (l *Link) IsConnected() bool { return l.nc.IsConnected() }

func (l *Link) up(reconnect bool) {
	l.mu.Lock()
	if !l.mu.connected {
		l.mu.connected, l.mu.since = true, time.Now()
	}
	l.mu.Unlock()
	if reconnect {
		l.reconnects.Add(1)
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

func (l *Link) down(err error) {
	l.mu.Lock()
	if l.mu.connected {
		l.mu.connected, l.mu.since = false, time.Now()
		l.disconnects.Add(1)
	}
	if err != nil {
		l.mu.lastErr = err.Error()
	}
	l.mu.Unlock()
}

// OnReconnect adds f to what runs after every reconnection, in the order
// added, on the Link's callback goroutine.
func (l *Link) OnReconnect(f func()) {
	l.mu.Lock()
	l.mu.onRe = append(l.mu.onRe, f)
	l.mu.Unlock()
}

// run runs the reconnect callbacks until Close.
func (l *Link) run() {
	defer close(l.done)
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
			l.mu.Lock()
			fs := l.mu.onRe
			l.mu.Unlock()
			for _, f := range fs {
				f()
			}
		}
	}
}

// Status returns the link's state.
func (l *Link) Status() LinkStatus {
	l.mu.Lock()
	s := LinkStatus{Connected: l.mu.connected, Since: l.mu.since.UTC().Format(time.RFC3339Nano), LastError: l.mu.lastErr}
	l.mu.Unlock()
	s.URL = l.nc.ConnectedUrlRedacted()
	if s.URL == "" && len(l.nc.Servers()) > 0 {
		s.URL = l.nc.Servers()[0]
	}
	s.Disconnects, s.Reconnects = l.disconnects.Load(), l.reconnects.Load()
	return s
}

// Close closes the connection and stops the callback goroutine.
func (l *Link) Close() {
	l.nc.Close()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}
