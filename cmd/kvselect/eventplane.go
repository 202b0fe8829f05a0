package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin/natsplane"
)

// The event plane of `kvselect serve`: Dynamo's NATS subjects for KV events
// and bookings (zmqin/natsplane), beside or instead of the ZMQ listeners
// and mesh. Its flags are split off serve's before parseServe
// (splitEventPlaneArgs), so this file owns them whole.

// eventPlaneOptions are the event-plane flags and environment, named as
// Dynamo names them (ai-dynamo/dynamo:
// components/src/dynamo/common/configuration/groups/runtime_args.py,
// lib/backend-common/src/args.rs).
type eventPlaneOptions struct {
	// nats is --event-plane nats (DYN_EVENT_PLANE); zmq (the default,
	// also Dynamo's since #10902) keeps the ZMQ listeners and mesh only.
	nats bool
	// url is --nats-server (NATS_SERVER): the fleet's NATS, kvselect then
	// only a client; "" runs the embedded server.
	url string
	// scope is the workers' endpoint: --namespace (DYN_NAMESPACE,
	// default dynamo), --component (DYN_COMPONENT, default backend),
	// --endpoint (DYN_ENDPOINT, default generate; dyn://ns.comp.ep sets
	// all three).
	scope natsplane.Scope
	// listen, clusterListen and routes configure the embedded server:
	// its client listener (--nats-listen, default 127.0.0.1:4222), its
	// route listener (--nats-cluster-listen, "" for none) and the other
	// members' route URLs (--nats-routes, comma-separated).
	listen, clusterListen string
	routes                []string
	// bookings is --event-plane-bookings (default true): share bookings
	// on active_sequences_events.
	bookings bool
	// queueLimit is --event-plane-queue: the outbound booking queue.
	queueLimit int
	// dynamoForm is --event-plane-dynamo-bookings: when Dynamo's form of
	// the bookings (one ActiveSequenceEvent a message) is published beside
	// the batches kvselect replicas exchange (natsplane.DynamoForm).
	dynamoForm natsplane.DynamoForm
	// catalog is --nats-catalog: the worker catalog in a JetStream
	// key-value bucket, with --nats-catalog-replicas copies; storeDir is
	// the embedded server's JetStream directory (--nats-store-dir, ""
	// for a temporary one removed at exit).
	catalog         bool
	catalogReplicas int
	storeDir        string
	// peerTimeout is --event-plane-peer-timeout: a kvselect peer silent
	// that long has its mirrored bookings released (natsplane's liveness
	// rules: a peer heard again is asked for its snapshot, so a release
	// by mistake is undone); 0 never. Default natsplane.DefaultPeerTimeout
	// (it was off while a replica registered a peer from its beats only:
	// the newest replica of TestEventPlaneThreeReplicas had heard one
	// peer's beat and not the other's, killed before its next one, and
	// kept its mirror; every batch and snapshot chunk now says its sender
	// beats). Dynamo routers never beat and are never released this way.
	peerTimeout time.Duration
	// noSnapshot is serve's --no-replica-snapshot: no catch-up snapshot
	// on the bus either.
	noSnapshot bool
	// set names the flags given on the command line (the indexer refuses
	// serve's bookings and catalog flags).
	set map[string]bool
}

// eventPlaneFlags are the flags splitEventPlaneArgs takes out of serve's
// arguments; the value is whether the flag is a boolean.
var eventPlaneFlags = map[string]bool{
	"event-plane": false, "nats-server": false, "namespace": false, "component": false, "endpoint": false,
	"nats-listen": false, "nats-cluster-listen": false, "nats-routes": false,
	"event-plane-bookings": true, "event-plane-queue": false, "event-plane-dynamo-bookings": false,
	"nats-catalog": true, "nats-catalog-replicas": false, "nats-store-dir": false, "event-plane-peer-timeout": false,
}

// splitEventPlaneArgs separates the event-plane flags (in any of the flag
// package's forms: -f v, --f v, -f=v, --f=v) from the rest of args, which
// keep their order. It does not know the arity of serve's own flags, so
// it looks at every argument up to "--" (serve takes no positional
// arguments; a value of another flag spelled like one of these would be
// taken).
func splitEventPlaneArgs(args []string) (rest, mine []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), mine
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool, ours := eventPlaneFlags[name]
		if !ours {
			rest = append(rest, a)
			continue
		}
		mine = append(mine, a)
		if !hasValue && !isBool && i+1 < len(args) {
			i++
			mine = append(mine, args[i])
		}
	}
	return rest, mine
}

// eventPlaneFlagSet defines the event-plane flags on a flag set of their
// own, defaults from the environment; finish validates what was parsed.
func eventPlaneFlagSet(env func(string) (string, bool), stderr io.Writer) (fs *flag.FlagSet, finish func() (*eventPlaneOptions, error)) {
	get := func(name, def string) string {
		if v, ok := env(name); ok && v != "" {
			return v
		}
		return def
	}
	fs = flag.NewFlagSet("kvselect serve (event plane)", flag.ContinueOnError)
	fs.SetOutput(stderr)
	plane := fs.String("event-plane", get("DYN_EVENT_PLANE", "zmq"), "event plane: zmq (worker ZMQ listeners, ZMQ replica mesh) or nats (Dynamo's NATS subjects for KV events and bookings as well; overrides DYN_EVENT_PLANE)")
	o := &eventPlaneOptions{}
	fs.StringVar(&o.url, "nats-server", get("NATS_SERVER", ""), "NATS URL of the fleet's server (overrides NATS_SERVER); unset with --event-plane nats: run an embedded NATS server")
	fs.StringVar(&o.scope.Namespace, "namespace", get("DYN_NAMESPACE", "dynamo"), "Dynamo namespace of the workers (overrides DYN_NAMESPACE)")
	fs.StringVar(&o.scope.Component, "component", get("DYN_COMPONENT", "backend"), "Dynamo component of the workers (overrides DYN_COMPONENT)")
	endpoint := fs.String("endpoint", get("DYN_ENDPOINT", "generate"), "Dynamo endpoint of the workers, a name or dyn://namespace.component.endpoint (overrides DYN_ENDPOINT)")
	fs.StringVar(&o.listen, "nats-listen", "127.0.0.1:4222", "embedded NATS server: client listener host:port (port 0: any free one)")
	fs.StringVar(&o.clusterListen, "nats-cluster-listen", "", "embedded NATS server: route listener host:port for clustering with other replicas; empty: no cluster")
	routes := fs.String("nats-routes", "", "embedded NATS server: comma-separated route URLs (nats://host:port) of the other replicas' servers")
	fs.BoolVar(&o.bookings, "event-plane-bookings", true, "with --event-plane nats, share bookings with Dynamo routers and replicas on active_sequences_events")
	fs.IntVar(&o.queueLimit, "event-plane-queue", natsplane.DefaultQueueLimit, "bookings queued for NATS at most; past it a booking's event is dropped (counted), never waited for")
	dynamoForm := fs.String("event-plane-dynamo-bookings", "auto", "with --event-plane nats, when to publish Dynamo's form of the bookings (one ActiveSequenceEvent a message, for Dynamo routers) beside the batches kvselect replicas exchange on kvselect-bookings: auto (while a Dynamo router's booking was heard in the last 10 minutes), always, or never; Dynamo routers' bookings are applied in every mode")
	fs.BoolVar(&o.catalog, "nats-catalog", false, "with --event-plane nats, share the worker catalog in a JetStream key-value bucket: a replica with --workers-file mirrors the file into it, the others take their catalog from it (their POST, PATCH and DELETE /workers then answer 409); the embedded server runs JetStream")
	fs.IntVar(&o.catalogReplicas, "nats-catalog-replicas", 1, "JetStream copies of the catalog bucket (1 to 5; at most the cluster's servers)")
	fs.StringVar(&o.storeDir, "nats-store-dir", "", "embedded NATS server: JetStream directory with --nats-catalog; empty: a temporary one, removed at exit")
	fs.DurationVar(&o.peerTimeout, "event-plane-peer-timeout", natsplane.DefaultPeerTimeout, "with --event-plane nats, a kvselect replica whose heartbeats (one a second) and booking batches stop for this long is taken for dead and its bookings mirrored here are released; heard again, it is asked for its snapshot (Dynamo routers, which never beat, are never released); 0: off, a dead replica's mirrors end at the expiry guard as on the mesh")
	return fs, func() (*eventPlaneOptions, error) {
		var err error
		if o.dynamoForm, err = natsplane.ParseDynamoForm(*dynamoForm); err != nil {
			return nil, fmt.Errorf("--event-plane-dynamo-bookings: %w", err)
		}
		return o.finish(*plane, *endpoint, *routes)
	}
}

// writeEventPlaneUsage appends the event-plane flags to serve's usage (its
// flag set does not hold them).
func writeEventPlaneUsage(w io.Writer, env func(string) (string, bool)) {
	fs, _ := eventPlaneFlagSet(env, w)
	fmt.Fprintln(w, "Event plane (Dynamo's NATS subjects; these flags are read before the others):")
	fs.PrintDefaults()
}

// parseEventPlane reads the event-plane flags of args (split off the rest,
// which it returns) on top of the environment.
func parseEventPlane(args []string, env func(string) (string, bool), stderr io.Writer) ([]string, *eventPlaneOptions, error) {
	rest, mine := splitEventPlaneArgs(args)
	fs, finish := eventPlaneFlagSet(env, stderr)
	if err := fs.Parse(mine); err != nil {
		return nil, nil, err
	}
	o, err := finish()
	if err != nil {
		return nil, nil, err
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return rest, o, nil
}

// finish checks the parsed flags.
func (o *eventPlaneOptions) finish(plane, endpoint, routes string) (*eventPlaneOptions, error) {
	switch plane {
	case "zmq":
	case "nats":
		o.nats = true
	default:
		return nil, fmt.Errorf("--event-plane (DYN_EVENT_PLANE) %q: want zmq or nats", plane)
	}
	if spec, ok := strings.CutPrefix(endpoint, "dyn://"); ok {
		parts := strings.FieldsFunc(spec, func(r rune) bool { return r == '.' || r == '/' })
		if len(parts) != 3 {
			return nil, fmt.Errorf("--endpoint %q: want dyn://namespace.component.endpoint", endpoint)
		}
		o.scope = natsplane.Scope{Namespace: parts[0], Component: parts[1], Endpoint: parts[2]}
	} else {
		o.scope.Endpoint = endpoint
	}
	if err := o.scope.Validate(); err != nil {
		return nil, err
	}
	o.routes = splitList(routes)
	if o.queueLimit <= 0 {
		return nil, errors.New("--event-plane-queue must be > 0")
	}
	if o.peerTimeout < 0 || o.peerTimeout > 0 && o.peerTimeout <= natsplane.DefaultHeartbeatInterval {
		return nil, fmt.Errorf("--event-plane-peer-timeout must be 0 or above the heartbeat interval (%v)", natsplane.DefaultHeartbeatInterval)
	}
	if o.catalogReplicas < 1 || o.catalogReplicas > 5 {
		return nil, errors.New("--nats-catalog-replicas must be 1 to 5")
	}
	if o.url != "" && (o.clusterListen != "" || len(o.routes) > 0 || o.storeDir != "") {
		return nil, errors.New("--nats-cluster-listen, --nats-routes and --nats-store-dir configure the embedded server; with --nats-server there is none")
	}
	return o, nil
}

// eventPlane is a serve's NATS event plane once started: the embedded
// server (nil with --nats-server), the connection, the KV ingress (nil
// without KV events) and the bookings (nil when off).
type eventPlane struct {
	o    *eventPlaneOptions
	srv  *natsplane.Server
	link *natsplane.Link
	in   *natsplane.Ingress
	bk   *natsplane.Bookings
	// url is the bus's client URL (the embedded server's, or
	// --nats-server).
	url string
	// start subscribes once the service exists (the indexer passes nil:
	// it has no bookings), running starts in order.
	start  func(svc *core.Service) error
	starts []func(*core.Service) error
	// affinity: the bookings also carry session bindings.
	affinity bool
	// cat is the catalog bucket (nil without --nats-catalog).
	cat *natsplane.Catalog
	log *slog.Logger
}

// catalogMirrorPoll is how often the mirroring replica hands its catalog
// to the bucket's writer (which writes only what differs).
const catalogMirrorPoll = time.Second

// runCatalog puts the catalog bucket to work once the service exists and
// its discovery source (hasSource: --workers-file) holds the catalog: the
// replica with the source mirrors its catalog into the bucket; one
// without takes its catalog from the bucket, which then owns it.
func (ep *eventPlane) runCatalog(n *node, svc *core.Service, hasSource bool) error {
	if ep == nil || ep.cat == nil {
		return nil
	}
	if hasSource {
		mirror := func(time.Time) {
			ws := svc.ListWorkers("", "")
			specs := make([]core.WorkerSpec, len(ws))
			for i := range ws {
				specs[i] = core.WorkerSpec{WorkerID: ws[i].WorkerID, ModelName: ws[i].ModelName, RoutingGroup: ws[i].RoutingGroup, WorkerFields: ws[i].WorkerFields}
			}
			if err := ep.cat.Mirror(specs); err != nil {
				ep.log.Warn("worker catalog: not mirrored", "err", err)
			}
		}
		mirror(time.Now())
		n.every("catalog bucket mirror", catalogMirrorPoll, mirror)
		ep.log.Info("worker catalog: mirroring --workers-file into the JetStream bucket", "bucket", ep.cat.Bucket())
		return nil
	}
	rec, err := core.NewCatalogReconciler(svc, core.ReconcilerConfig{
		Name: "--nats-catalog", Exclusive: true, Logf: printf(ep.log, slog.LevelWarn),
	})
	if err != nil {
		return err
	}
	n.onStopDo("catalog bucket ownership", rec.Close)
	n.loop("catalog bucket reconciler", func(ctx context.Context) {
		if err := rec.Run(ctx, ep.cat); err != nil {
			ep.log.Warn("worker catalog: clearing the catalog failed", "err", err)
		}
	})
	ep.log.Info("worker catalog: taken from the JetStream bucket (POST, PATCH and DELETE /workers answer 409)", "bucket", ep.cat.Bucket())
	return nil
}

// routeWatch is how often the embedded server's routes are counted.
const routeWatch = 250 * time.Millisecond

// ownClose is an Ingress whose Close does nothing: serve closes the ZMQ
// ingress itself, after the event plane's.
type ownClose struct{ core.Ingress }

func (ownClose) Close() error { return nil }

// startEventPlane starts the bus (startBus) and builds the plane's parts;
// nil without --event-plane nats. ingress is serve's KV ingress
// (core.NopIngress: KV events off or a remote index), replica its replica
// sink; with an ingress, ccfg's KVEndpointsOptional is set. It returns the
// ingress and sink the service is to use, and pushes every stop onto n.
func startEventPlane(n *node, o *eventPlaneOptions, logs *logs, ccfg *core.Config, ingress core.Ingress, replica core.ReplicaSink) (*eventPlane, core.Ingress, core.ReplicaSink, error) {
	if o == nil || !o.nats {
		return nil, ingress, replica, nil
	}
	ep, err := startBus(n, o, logs)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, nop := ingress.(core.NopIngress); !nop {
		// Workers on the bus have no ZMQ endpoint: their ranks are fed
		// by worker id.
		ccfg.KVEndpointsOptional = true
		if ingress, err = ep.kvIngress(n, ingress); err != nil {
			return nil, nil, nil, err
		}
	}
	nc, link := ep.link.Conn(), ep.link
	if o.bookings {
		if ep.bk, err = natsplane.NewBookings(natsplane.BookingsConfig{Scope: o.scope, QueueLimit: o.queueLimit, DynamoForm: o.dynamoForm, NoSnapshot: o.noSnapshot, PeerTimeout: cmp.Or(o.peerTimeout, -1), Logger: ep.log}); err != nil {
			return nil, nil, nil, err
		}
		n.onStop("NATS bookings", ep.bk.Close)
		if _, nop := replica.(core.NopReplicaSink); nop {
			replica = ep.bk
		} else {
			replica = fanOut{replica, ep.bk}
		}
		ep.starts = append(ep.starts, func(svc *core.Service) error {
			if ep.affinity {
				ep.bk.HandleAffinity(svc)
			}
			return ep.bk.Start(nc, svc)
		})
		// Each side of a partition missed the other's bookings: on
		// reconnect, snapshots both ways.
		link.OnReconnect(ep.bk.Resync)
		if ep.srv != nil && !o.noSnapshot {
			// The join's request may leave before the embedded server's
			// routes are up: each new route asks again.
			ep.starts = append(ep.starts, func(*core.Service) error {
				routes := 0
				n.every("NATS route watch", routeWatch, func(time.Time) {
					r := ep.srv.NumRoutes()
					if r > routes {
						ep.bk.CatchUp()
					}
					routes = r
				})
				return nil
			})
		}
	}
	ep.log.Info("event plane: NATS", "url", ep.url, "embedded", ep.srv != nil, "scope", o.scope, "kv_events", ep.in != nil, "bookings", ep.bk != nil)
	return ep, ingress, replica, nil
}

// startBus starts the embedded server (without --nats-server), the link
// to the bus and, with --nats-catalog, the catalog bucket: what serve and
// the indexer share. The parts are added by kvIngress and the bookings;
// ep.start runs their subscriptions once the host is ready.
func startBus(n *node, o *eventPlaneOptions, logs *logs) (*eventPlane, error) {
	log := logs.logger("kvselect::natsplane")
	ep := &eventPlane{o: o, log: log, url: o.url}
	ep.start = func(svc *core.Service) error {
		for _, s := range ep.starts {
			if err := s(svc); err != nil {
				return err
			}
		}
		return nil
	}
	if ep.url == "" {
		cfg, err := o.serverConfig()
		if err != nil {
			return nil, err
		}
		if o.catalog {
			cfg.JetStream, cfg.StoreDir = true, o.storeDir
			if cfg.StoreDir == "" {
				if cfg.StoreDir, err = os.MkdirTemp("", "kvselect-jetstream-"); err != nil {
					return nil, err
				}
				dir := cfg.StoreDir
				n.onStop("JetStream directory", func() error { return os.RemoveAll(dir) })
			}
		}
		if cfg.Port > 0 {
			if err := probeListen(o.listen); err != nil {
				if o.set["nats-listen"] {
					return nil, fmt.Errorf("--nats-listen %s: %w", o.listen, err)
				}
				// The default is taken (another kvselect on this host): the
				// embedded server is the replica's own, reached in-process,
				// so any free port serves; routes name --nats-cluster-listen.
				log.Warn("the embedded NATS server's default client address is taken (another process on this host?); listening on a free port instead (--nats-listen chooses one)", "default", o.listen, "err", err)
				cfg.Port = 0
			}
		}
		cfg.Logger = logs.logger("kvselect::nats-server")
		if ep.srv, err = natsplane.StartServer(cfg); err != nil {
			return nil, err
		}
		n.onStop("embedded NATS server", ep.srv.Close)
		ep.url = ep.srv.ClientURL()
		log.Info("embedded NATS server running", "client_url", ep.url, "cluster_url", ep.srv.ClusterURL(), "routes", o.routes)
	}
	var err error
	if ep.srv != nil {
		ep.link, err = natsplane.DialInProcess(ep.srv, "kvselect", log)
	} else {
		ep.link, err = natsplane.Dial(ep.url, "kvselect", log)
	}
	if err != nil {
		return nil, fmt.Errorf("NATS %s: %w", ep.url, err)
	}
	n.onStopDo("NATS connection", ep.link.Close)
	if o.catalog {
		if ep.cat, err = natsplane.NewCatalog(natsplane.CatalogConfig{Scope: o.scope, Replicas: o.catalogReplicas, Logger: logs.logger("kvselect::catalog_bucket")}); err != nil {
			return nil, err
		}
		if err := ep.cat.Start(ep.link.Conn()); err != nil {
			return nil, err
		}
		n.onStop("NATS catalog bucket", ep.cat.Close)
	}
	return ep, nil
}

// kvIngress wraps the host's ZMQ ingress (closed by the host, after this
// one) in the plane's KV ingress, subscribed by ep.start: the ranks
// registered without a ZMQ endpoint are fed from the workers' kv-events
// subjects, the others stay the ZMQ ingress's.
func (ep *eventPlane) kvIngress(n *node, zmq core.Ingress) (core.Ingress, error) {
	var err error
	if ep.in, err = natsplane.NewIngress(natsplane.IngressConfig{Scope: ep.o.scope, Inner: ownClose{zmq}, Logger: ep.log}); err != nil {
		return nil, err
	}
	n.onStop("NATS KV ingress", ep.in.Close)
	ep.starts = append(ep.starts, func(*core.Service) error { return ep.in.Start(ep.link.Conn()) })
	return ep.in, nil
}

// serverConfig is the embedded server's configuration.
func (o *eventPlaneOptions) serverConfig() (natsplane.ServerConfig, error) {
	var cfg natsplane.ServerConfig
	var err error
	if cfg.Host, cfg.Port, err = hostPort(o.listen); err != nil {
		return cfg, fmt.Errorf("--nats-listen: %w", err)
	}
	if o.clusterListen != "" {
		if cfg.ClusterHost, cfg.ClusterPort, err = hostPort(o.clusterListen); err != nil {
			return cfg, fmt.Errorf("--nats-cluster-listen: %w", err)
		}
		if cfg.ClusterPort == 0 {
			cfg.ClusterPort = -1
		}
	}
	if len(o.routes) > 0 && o.clusterListen == "" {
		return cfg, errors.New("--nats-routes needs --nats-cluster-listen")
	}
	cfg.Routes = o.routes
	return cfg, nil
}

func hostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q", p)
	}
	return h, port, nil
}

// withAffinity makes the plane's bookings carry session bindings too
// (serve's --session-affinity-ttl-secs), beside the ZMQ mesh's when
// copts has it: its writer id then stays the mesh's process id.
func (ep *eventPlane) withAffinity(copts *core.Options) {
	if ep == nil || ep.bk == nil {
		return
	}
	ep.affinity = true
	if copts.Affinity == nil {
		copts.Affinity, copts.WriterID = ep.bk, ep.bk.RouterID()
		return
	}
	copts.Affinity = affinityFanOut{copts.Affinity, ep.bk}
}

// affinityFanOut publishes bindings to both sinks; neither blocks.
type affinityFanOut [2]core.AffinitySink

func (f affinityFanOut) PublishAffinity(ev *core.AffinityEvent) {
	f[0].PublishAffinity(ev)
	f[1].PublishAffinity(ev)
}

// fanOut publishes to both replica sinks (the ZMQ mesh and the NATS
// bookings); neither blocks.
type fanOut [2]core.ReplicaSink

func (f fanOut) Publish(ev *core.ReplicaEvent) {
	f[0].Publish(ev)
	f[1].Publish(ev)
}

// attach subscribes the plane's parts once the service exists, and
// exports its metrics on reg.
func (ep *eventPlane) attach(svc *core.Service, reg *perf.Registry) error {
	if ep == nil {
		return nil
	}
	reg.Describe(eventPlaneDescs...)
	reg.OnScrape(func(w io.Writer) { writeEventPlaneMetrics(w, ep) })
	svc.SetEventPlaneProbe(ep.readyDetail)
	return ep.start(svc)
}

// eventPlaneReady is /ready's event_plane: the link, and with the
// embedded server its live routes. A replica cut off stays ready: it
// selects on its own view, and re-synchronises on reconnect.
type eventPlaneReady struct {
	natsplane.LinkStatus
	Embedded bool `json:"embedded_server"`
	Routes   *int `json:"nats_routes,omitempty"`
}

func (ep *eventPlane) readyDetail() any {
	r := eventPlaneReady{LinkStatus: ep.link.Status(), Embedded: ep.srv != nil}
	if ep.srv != nil {
		n := ep.srv.NumRoutes()
		r.Routes = &n
	}
	return r
}

// probeListen reports whether addr can be bound now, by binding and
// closing it: nats-server only logs a listener it cannot bind and then
// waits for readiness that never comes, so the address is checked first.
func probeListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}
