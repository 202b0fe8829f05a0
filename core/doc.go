// Package core is the selection service as an embeddable Go library: the
// partitions (model_name, routing_group), the worker catalog, selections,
// reservations, the pending-selection cache and expiry. It composes radix
// (the KV index) and sched (cost function, picker, load accounting) and has
// no sockets and no HTTP: a host (cmd/kvselect) wires an Ingress (zmqin's
// ZMQ listeners) and an HTTP front end (httpapi) around it.
package core
