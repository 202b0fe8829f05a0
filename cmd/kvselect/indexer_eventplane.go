package main

import (
	"fmt"
	"io"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin/natsplane"
)

// The event plane of `kvselect indexer`: with --event-plane nats
// (DYN_EVENT_PLANE) the standalone indexer takes KV events from the
// workers' kv-events subjects as serve does (startBus, kvIngress: the same
// embedded server or --nats-server connection, and the same
// natsplane.Ingress around the ZMQ ingress, feeding the index writers),
// so a rank may be registered without a ZMQ endpoint (POST /register with
// "endpoint": "", or --workers id[:rank]=). The indexer books nothing and
// keeps no catalog: serve's bookings and catalog flags are refused.

// indexerRefusedPlaneFlags are the event-plane flags that configure
// serve's bookings or catalog.
var indexerRefusedPlaneFlags = []string{
	"event-plane-bookings", "event-plane-queue", "event-plane-peer-timeout", "event-plane-dynamo-bookings",
	"nats-catalog", "nats-catalog-replicas", "nats-store-dir",
}

// forIndexer refuses the flags the indexer has no use for.
func (o *eventPlaneOptions) forIndexer() error {
	for _, f := range indexerRefusedPlaneFlags {
		if o.set[f] {
			return fmt.Errorf("--%s: the indexer has no bookings or catalog (it is serve's flag)", f)
		}
	}
	return nil
}

// startIndexerPlane starts the bus and the KV ingress around zmq (which
// the indexer closes itself, after); nil and zmq without --event-plane
// nats. ixCfg's KVEndpointsOptional is set with the plane: a rank without
// a ZMQ endpoint is then fed by the bus.
func startIndexerPlane(n *node, o *eventPlaneOptions, logs *logs, ixCfg *core.IndexerConfig, zmq core.Ingress) (*eventPlane, core.Ingress, error) {
	if o == nil || !o.nats {
		return nil, zmq, nil
	}
	o.bookings, o.catalog = false, false
	ep, err := startBus(n, o, logs)
	if err != nil {
		return nil, nil, err
	}
	in, err := ep.kvIngress(n, zmq)
	if err != nil {
		return nil, nil, err
	}
	ixCfg.KVEndpointsOptional = true
	ep.log.Info("event plane: NATS (KV events only)", "url", ep.url, "embedded", ep.srv != nil, "scope", o.scope, "subjects", (&natsplane.IngressConfig{Scope: o.scope}).Subjects())
	return ep, in, nil
}

// attachIndexer exports the plane's metrics on reg and subscribes.
func (ep *eventPlane) attachIndexer(reg *perf.Registry) error {
	if ep == nil {
		return nil
	}
	reg.Describe(eventPlaneDescs...)
	reg.OnScrape(func(w io.Writer) { writeEventPlaneMetrics(w, ep) })
	return ep.start(nil)
}
