package epp

import (
	"cmp"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kvselect/kvselect/core"
)

// The served endpoint. GIE's protocol has the gateway report, in the
// response path's metadata_context (Config.MetadataNamespace, key
// x-gateway-destination-endpoint-served), the ip:port that served the
// request, because with a destination list (Config.Fallbacks) it may have
// retried past the first, booked, endpoint
// (kubernetes-sigs/gateway-api-inference-extension:docs/proposals/
// 004-endpoint-picker-protocol/README.md, "Destination Endpoint Served").
//
// Invariant: a stream holds at most one booking, on the worker that
// serves its request once the gateway has said which. When the served
// endpoint is another known worker of the booking's partition, the same
// request (prompt, model, group) is booked there under a new id
// (core.Service.Reserve, explicit worker: its prefill credit is the
// served worker's cache) and only then is the picked worker's booking
// freed, so the load moves whole, and a failed booking leaves the first
// one where it was (counted). The response headers come before any
// response body, so the moved booking has no prefill completion or
// output block to carry over. Not moved: a disaggregated plan (its decode
// leg; the EPP lists no fallbacks for plans) and a session binding (it
// keeps the picked worker until its TTL).

// servedSuffix makes a moved booking's id from the picked one's: distinct
// (the two are live together for a moment) and never a plan leg's ("/").
const servedSuffix = "~served"

// served reads the served endpoint from the response headers' metadata
// and moves the booking when it names another worker.
func (st *stream) served(md *corev3.Metadata) {
	v, ok := md.GetFilterMetadata()[st.s.cfg.MetadataNamespace].GetFields()[ServedKey]
	if !ok {
		return
	}
	served := strings.TrimSpace(v.GetStringValue())
	if served == "" || sameHostPort(served, st.dest) {
		return
	}
	st.s.stats.served.Add(1)
	if st.plan {
		st.s.stats.servedUnmoved.Add(1)
		return
	}
	model, group := cmp.Or(st.sreq.ModelName, core.DefaultPartition), cmp.Or(st.sreq.RoutingGroup, core.DefaultPartition)
	id, rank, ok := st.s.workerAt(model, group, served, st.sel.DPRank)
	if !ok {
		if st.s.stats.servedUnknown.Add(1) == 1 {
			st.s.cfg.Logger.Warn("the gateway reports a served endpoint that is no worker of the pool; the booking stays on the picked one (counted, logged once)",
				"served", served, "picked", st.dest, "model", model, "routing_group", group)
		}
		return
	}
	req := core.ReservationRequest{
		ModelName: model, RoutingGroup: group, SelectionID: st.id + servedSuffix,
		WorkerID: id, HasWorkerID: true, DPRank: rank, Prompt: st.sreq.Prompt,
	}
	if _, err := st.s.svc.Reserve(&req); err != nil {
		st.s.stats.servedUnmoved.Add(1)
		st.s.cfg.Logger.Debug("served elsewhere: booking the served worker failed; the booking stays on the picked one", "served", served, "worker_id", id, "err", err)
		return
	}
	_ = st.s.svc.Free(st.id)
	st.id, st.dest = req.SelectionID, served
	st.s.stats.servedMoved.Add(1)
}

// workerAt finds the worker of (model, group) whose endpoint is hp, and
// its rank: rank if the worker has it, else its first.
func (s *Server) workerAt(model, group, hp string, rank uint32) (uint64, uint32, bool) {
	for _, r := range s.svc.ListWorkers(model, group) {
		if r.Endpoint == nil || r.Lifecycle != core.Schedulable {
			continue
		}
		if ep, ok := hostPort(*r.Endpoint); !ok || !sameHostPort(ep, hp) {
			continue
		}
		start, size := uint32(0), uint32(1)
		if r.DataParallelStartRank != nil {
			start = *r.DataParallelStartRank
		}
		if r.DataParallelSize != nil {
			size = max(*r.DataParallelSize, 1)
		}
		if rank < start || rank >= start+size {
			rank = start
		}
		return r.WorkerID, rank, true
	}
	return 0, 0, false
}

// sameHostPort compares two ip:port endpoints as addresses (an IPv6
// address written two ways is one), else as text.
func sameHostPort(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := netip.ParseAddrPort(a)
	y, err2 := netip.ParseAddrPort(b)
	return err1 == nil && err2 == nil && x.Addr().Unmap() == y.Addr().Unmap() && x.Port() == y.Port()
}
