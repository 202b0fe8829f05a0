package epp

import (
	"cmp"
	"net"
	"slices"
	"strings"

	"github.com/kvselect/kvselect/core"
)

// The subset hint and the fallback endpoints.

// hostPort is a worker endpoint's ip:port: the endpoint less its scheme
// and path ("http://10.0.0.7:8000/v1" is "10.0.0.7:8000"), ok only with a
// host and a port.
func hostPort(ep string) (string, bool) {
	if _, rest, ok := strings.Cut(ep, "://"); ok {
		ep = rest
	}
	if i := strings.IndexByte(ep, '/'); i >= 0 {
		ep = ep[:i]
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host == "" || port == "" {
		return "", false
	}
	return ep, true
}

// inSubset reports whether endpoint hp (ip:port) is in the hint: an entry
// equal to it, or an entry without a port naming its host (Dynamo's EPP
// matches both; IPv6 entries bracketed or bare).
func inSubset(hp string, hint []string) bool {
	host, _, _ := net.SplitHostPort(hp)
	for _, h := range hint {
		if h == hp || strings.Trim(h, "[]") == host {
			return true
		}
	}
	return false
}

// subsetIDs appends to dst the workers of (model, group) whose endpoint
// is in the hint.
func (s *Server) subsetIDs(model, group string, hint []string, dst []uint64) []uint64 {
	for _, r := range s.svc.ListWorkers(cmp.Or(model, core.DefaultPartition), cmp.Or(group, core.DefaultPartition)) {
		if r.Endpoint == nil {
			continue
		}
		if hp, ok := hostPort(*r.Endpoint); ok && inSubset(hp, hint) {
			dst = append(dst, r.WorkerID)
		}
	}
	return dst
}

// fallbacks is the destination list: dest, then up to Config.Fallbacks
// other endpoints of the partition (in the subset when hinted) in
// ascending potential load for this prompt (core's PotentialLoads). They
// are not booked.
func (s *Server) fallbacks(st *stream, dest string) string {
	loads, err := s.svc.PotentialLoads(&core.QueryRequest{ModelName: st.sreq.ModelName, RoutingGroup: st.sreq.RoutingGroup, Prompt: st.sreq.Prompt})
	if err != nil {
		return dest
	}
	slices.SortStableFunc(loads, func(a, b core.PotentialLoad) int {
		return cmp.Or(cmp.Compare(a.PotentialPrefillTokens, b.PotentialPrefillTokens), cmp.Compare(a.PotentialDecodeBlocks, b.PotentialDecodeBlocks))
	})
	eps := map[uint64]string{}
	for _, r := range s.svc.ListWorkers(st.sreq.ModelName, cmp.Or(st.sreq.RoutingGroup, core.DefaultPartition)) {
		if r.Endpoint != nil {
			if hp, ok := hostPort(*r.Endpoint); ok && (!st.hasSubset || inSubset(hp, st.subset)) {
				eps[r.WorkerID] = hp
			}
		}
	}
	list, seen := []string{dest}, map[string]bool{dest: true}
	for _, l := range loads {
		if hp, ok := eps[l.WorkerID]; ok && !seen[hp] && len(list) <= s.cfg.Fallbacks {
			seen[hp] = true
			list = append(list, hp)
		}
	}
	return strings.Join(list, ",")
}
