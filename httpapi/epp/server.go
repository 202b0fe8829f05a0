package epp

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Server is the ext_proc service. Safe for concurrent use: each stream's
// state is its own goroutine's (stream), and Server holds only the
// configuration and atomic counters.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	svc *core.Service
	cfg Config
	// pool recycles streams (their body buffers and request slices);
	// nothing of a stream is used after release.
	pool  sync.Pool
	stats counters
}

// New returns a Server over svc.
func New(svc *core.Service, cfg Config) (*Server, error) {
	if svc == nil {
		return nil, errors.New("epp: nil service")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{svc: svc, cfg: cfg}
	s.pool.New = func() any { return &stream{ans: newAnswers(s.cfg.MetadataNamespace)} }
	return s, nil
}

// Register mounts the ExternalProcessor service on g.
func (s *Server) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, s) }

// Process serves one gateway stream (one HTTP request): see the package
// doc. It returns nil when the gateway ends the stream, the stream's
// error otherwise; either way only after the request's booking is freed.
func (s *Server) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	st := s.acquire(ps)
	s.stats.active.Add(1)
	defer func() {
		st.finish()
		st.observe()
		s.stats.active.Add(-1)
		s.release(st)
	}()
	for {
		// Into the stream's own message (answers.in): the previous one is
		// done with, and what the stream keeps of it is copied.
		req := st.ans.in
		err := ps.RecvMsg(req)
		if err != nil {
			if errors.Is(err, io.EOF) {
				st.why = freeClosed
				return nil
			}
			st.why = freeCancelled
			return err
		}
		if err := st.handle(req); err != nil {
			if st.why == freeNone {
				st.why = freeSendFailed
			}
			return err
		}
	}
}

func (s *Server) acquire(ps extprocv3.ExternalProcessor_ProcessServer) *stream {
	st := s.pool.Get().(*stream)
	st.reset(s, ps)
	return st
}

// release pools st unless it kept a large body.
func (s *Server) release(st *stream) {
	big := cap(st.body) > 1<<20 || cap(st.resp) > 1<<20
	st.reset(nil, nil)
	if !big {
		s.pool.Put(st)
	}
}

// tokenizer is the tokenizer of a body naming model (has): the named one,
// else the configured model's, else the only one; nil and the 400's
// message when the body names a model without one.
func (s *Server) tokenizer(model string, has bool) (*text.Tokenizer, string) {
	toks := s.cfg.Tokenizers
	if has && model != "" {
		if t, ok := toks[model]; ok {
			return t, ""
		}
	}
	if t, ok := toks[s.cfg.ModelName]; ok && s.cfg.ModelName != "" {
		return t, ""
	}
	if len(toks) == 1 {
		for _, t := range toks {
			return t, ""
		}
	}
	return nil, "model " + model + " has no tokenizer: give it one with --model-path " + model + "=DIR"
}

// HealthServices are the grpc.health.v1 names the EPP answers: GIE's
// (liveness, readiness, the ext_proc service, as
// kubernetes-sigs/gateway-api-inference-extension:docs/proposals/004-endpoint-picker-protocol/README.md
// names them), the empty name, and inference-extension, which GIE's,
// llm-d's and Dynamo's charts probe.
var HealthServices = []string{"", "liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName, "inference-extension"}

// RegisterHealth mounts grpc.health.v1 on g and returns its server, every
// name NOT_SERVING but liveness (SERVING while the process answers).
func RegisterHealth(g *grpc.Server) *health.Server {
	h := health.NewServer()
	SetServing(h, false)
	healthpb.RegisterHealthServer(g, h)
	return h
}

// SetServing sets every name of HealthServices but liveness to SERVING
// (ready) or NOT_SERVING.
func SetServing(h *health.Server, ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range HealthServices {
		if name == "liveness" {
			h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
			continue
		}
		h.SetServingStatus(name, st)
	}
}

// Outcomes of a request, Stats.Requests' index.
const (
	// OutcomeRouted: picked and booked; OutcomeRoutedUnbooked: a request
	// without a body, routed without a booking.
	OutcomeRouted = iota
	OutcomeRoutedUnbooked
	OutcomeBadRequest  // 400
	OutcomeTooLarge    // 413
	OutcomeOverloaded  // 429
	OutcomeUnavailable // 503
	OutcomeInternal    // 500
	// OutcomeAbandoned: the stream ended before a pick.
	OutcomeAbandoned
	NumOutcomes
)

// OutcomeNames are the outcomes' metric labels.
var OutcomeNames = [NumOutcomes]string{"routed", "routed_unbooked", "bad_request", "too_large", "overloaded", "unavailable", "internal", "abandoned"}

// Why a booking was freed, Stats.Freed's index.
const (
	freeNone = iota
	// FreeComplete: the response ended (end_of_stream or trailers).
	FreeComplete
	// FreeClosed: the gateway closed the stream before the response ended.
	FreeClosed
	// FreeCancelled: the stream was reset or dropped (its context ended,
	// Recv failed).
	FreeCancelled
	// FreeSendFailed: an answer could not be sent.
	FreeSendFailed
	// FreeRejected: booked, then answered with an error (the booked
	// worker's endpoint is no ip:port).
	FreeRejected
	NumFreeReasons
)

const (
	freeClosed     = FreeClosed
	freeCancelled  = FreeCancelled
	freeSendFailed = FreeSendFailed
)

// FreeReasonNames are the free reasons' metric labels (index 0 unused).
var FreeReasonNames = [NumFreeReasons]string{"", "complete", "closed", "cancelled", "send_failed", "rejected"}

type counters struct {
	requests        [NumOutcomes]atomic.Uint64
	freed           [NumFreeReasons]atomic.Uint64
	active          atomic.Int64
	picks, subset   atomic.Uint64
	prefill, blocks atomic.Uint64
	served          atomic.Uint64
	servedMoved     atomic.Uint64
	servedUnknown   atomic.Uint64
	servedUnmoved   atomic.Uint64
	streams         atomic.Uint64
}

// Stats are the server's counters (Server.Stats).
type Stats struct {
	// Streams is every stream opened; Active those open now.
	Streams uint64
	Active  int64
	// Requests counts requests by outcome (OutcomeNames).
	Requests [NumOutcomes]uint64
	// Picks counts destinations answered (booked or not); SubsetPicks
	// those restricted by a subset hint.
	Picks, SubsetPicks uint64
	// PrefillComplete and OutputBlocks are the lifecycle calls made.
	PrefillComplete, OutputBlocks uint64
	// Freed counts freed bookings by reason (FreeReasonNames).
	Freed [NumFreeReasons]uint64
	// ServedElsewhere counts responses the gateway reports served by an
	// endpoint other than the booked one (a fallback): ServedMoved of
	// them moved their booking to the served worker (served.go),
	// ServedUnknown named no worker of the booking's partition, and
	// ServedUnmoved kept it (a plan, or the served worker's booking
	// failed).
	ServedElsewhere, ServedMoved, ServedUnknown, ServedUnmoved uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Streams: s.stats.streams.Load(), Active: s.stats.active.Load(),
		Picks: s.stats.picks.Load(), SubsetPicks: s.stats.subset.Load(),
		PrefillComplete: s.stats.prefill.Load(), OutputBlocks: s.stats.blocks.Load(),
		ServedElsewhere: s.stats.served.Load(), ServedMoved: s.stats.servedMoved.Load(),
		ServedUnknown: s.stats.servedUnknown.Load(), ServedUnmoved: s.stats.servedUnmoved.Load(),
	}
	for i := range st.Requests {
		st.Requests[i] = s.stats.requests[i].Load()
	}
	for i := range st.Freed {
		st.Freed[i] = s.stats.freed[i].Load()
	}
	return st
}
