package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// countingTestServer is a test double for the harness's client, not a
// stand-in for kvselect: it implements just enough of the selection API on a
// real loopback fasthttp server to count calls per route, keep the set of
// active reservations for GET /loads, and inject failures, so that a test can
// check what the driver sent and how it counted the answers.
type countingTestServer struct {
	url string

	// failReserveEvery > 0 answers every n-th select_and_reserve with 503.
	failReserveEvery int
	// leakDeletes makes DELETE answer 200 without freeing the reservation.
	leakDeletes bool
	// brokenLoads makes GET /loads answer 500.
	brokenLoads bool
	// stallAt > 0 makes the stallAt-th /select sleep for stall.
	stallAt int
	stall   time.Duration
	// onBook and onFree, when set, are called (with the server's lock
	// held) after a booking or plan is made, and after it is freed.
	onBook, onFree func(id string)

	mu struct {
		sync.Mutex
		calls    map[string]int // by route name (the report's names)
		reserves int            // select_and_reserve calls seen
		// firstReserve and lastReserve are when the first and the last
		// select_and_reserve arrived.
		firstReserve, lastReserve time.Time
		active                    map[string]bool
		// plans maps a live plan's id to whether its prefill leg is still
		// held (until prefill_complete).
		plans   map[string]bool
		workers []WorkerRequest
		badBody int // bodies the server could not decode
	}
}

func startCountingTestServer(t *testing.T, configure func(*countingTestServer)) *countingTestServer {
	t.Helper()
	s := &countingTestServer{}
	s.mu.calls = map[string]int{}
	s.mu.active = map[string]bool{}
	s.mu.plans = map[string]bool{}
	if configure != nil {
		configure(s)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: s.handle}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
	s.url = "http://" + ln.Addr().String()
	return s
}

// promptBody is what the server decodes from select bodies to check them.
type promptBody struct {
	SelectionID    string   `json:"selection_id"`
	PrefillGroup   *string  `json:"prefill_routing_group"`
	DecodeGroup    *string  `json:"decode_routing_group"`
	BlockHashes    []int64  `json:"block_hashes"`
	SequenceHashes []int64  `json:"sequence_hashes"`
	ISLTokens      int      `json:"isl_tokens"`
	TokenIDs       []uint32 `json:"token_ids"`
}

// selectAnswer is the server's selection response: worker 1 with a
// matched overlap of 32 tokens (2 blocks of 16).
const selectAnswer = `{"worker_id":1,"dp_rank":0,"overlap":{"longest_matched":32,"gpu":32,"dp":{"0":32},"cpu":32,"disk":32}}`

func (s *countingTestServer) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	method := string(ctx.Method())
	s.mu.Lock()
	defer s.mu.Unlock()
	okBody := func() { ctx.SetBodyString(`{"status":"ok"}`) }
	switch {
	case method == "POST" && path == "/workers":
		var w WorkerRequest
		if err := json.Unmarshal(ctx.PostBody(), &w); err != nil {
			ctx.SetStatusCode(422)
			return
		}
		s.mu.workers = append(s.mu.workers, w)
		ctx.SetStatusCode(201)
		okBody()
	case method == "GET" && path == "/ready":
		if len(s.mu.workers) == 0 {
			ctx.SetStatusCode(503)
		}
		fmt.Fprintf(ctx, `{"ready":%v,"schedulable_workers":%d,"workers":[]}`, len(s.mu.workers) > 0, len(s.mu.workers))
	case method == "GET" && path == "/loads" && s.brokenLoads:
		ctx.SetStatusCode(500)
	case method == "GET" && path == "/loads":
		active := len(s.mu.active)
		for _, prefill := range s.mu.plans {
			active++ // the decode leg
			if prefill {
				active++
			}
		}
		fmt.Fprintf(ctx, `[{"model_name":"default","routing_group":"default","loads":[{"worker_id":1,"dp_rank":0,"active_requests":%d}],"pending_count":0,"pending_isl_tokens":0}]`, active)
	case method == "POST" && path == "/select":
		s.mu.calls["select"]++
		if !s.checkBody(ctx, false) {
			return
		}
		if s.stallAt > 0 && s.mu.calls["select"] == s.stallAt {
			s.mu.Unlock()
			time.Sleep(s.stall) // the stall under test: hold this call only
			s.mu.Lock()
		}
		ctx.SetBodyString(selectAnswer)
	case method == "POST" && path == "/select_and_reserve":
		s.mu.calls["select_and_reserve"]++
		s.mu.reserves++
		if s.mu.firstReserve.IsZero() {
			s.mu.firstReserve = time.Now()
		}
		s.mu.lastReserve = time.Now()
		if !s.checkBody(ctx, true) {
			return
		}
		if s.failReserveEvery > 0 && s.mu.reserves%s.failReserveEvery == 0 {
			ctx.SetStatusCode(503)
			ctx.SetBodyString(`{"error":"no schedulable workers are available"}`)
			return
		}
		var b promptBody
		_ = json.Unmarshal(ctx.PostBody(), &b)
		if s.mu.active[b.SelectionID] {
			ctx.SetStatusCode(409)
			return
		}
		s.mu.active[b.SelectionID] = true
		if s.onBook != nil {
			s.onBook(b.SelectionID)
		}
		ctx.SetBodyString(selectAnswer)
	case method == "POST" && path == "/disagg/plan":
		s.mu.calls["disagg_plan"]++
		if !s.checkBody(ctx, true) {
			return
		}
		var b promptBody
		_ = json.Unmarshal(ctx.PostBody(), &b)
		if b.PrefillGroup == nil || *b.PrefillGroup != "prefill" || b.DecodeGroup == nil || *b.DecodeGroup != "decode" {
			s.mu.badBody++
			ctx.SetStatusCode(400)
			return
		}
		if _, ok := s.mu.plans[b.SelectionID]; ok {
			ctx.SetStatusCode(409)
			return
		}
		s.mu.plans[b.SelectionID] = true
		ctx.SetBodyString(`{"selection_id":"` + b.SelectionID + `","state":"linked"}`)
	case strings.HasPrefix(path, "/disagg/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(path, "/disagg/"), "/")
		prefill, ok := s.mu.plans[id]
		switch {
		case method == "POST" && op == "prefill_complete":
			s.mu.calls["disagg_prefill_complete"]++
			if ok && !prefill {
				s.mu.badBody++ // completed twice: the driver sends it once
			}
			if ok {
				s.mu.plans[id] = false
			}
		case method == "DELETE" && op == "":
			s.mu.calls["disagg_delete"]++
			delete(s.mu.plans, id)
		default:
			ctx.SetStatusCode(404)
			return
		}
		if !ok {
			ctx.SetStatusCode(404)
			return
		}
		okBody()
	case strings.HasPrefix(path, "/reservations/"):
		rest := strings.TrimPrefix(path, "/reservations/")
		id, op, _ := strings.Cut(rest, "/")
		name := op
		if method == "DELETE" && op == "" {
			name = "delete"
		}
		s.mu.calls[name]++
		if !s.mu.active[id] {
			ctx.SetStatusCode(404)
			return
		}
		if name == "output_block" && !bytes.Equal(ctx.PostBody(), []byte("{}")) {
			s.mu.badBody++
		}
		if name == "delete" && !s.leakDeletes {
			delete(s.mu.active, id)
			if s.onFree != nil {
				s.onFree(id)
			}
		}
		okBody()
	default:
		ctx.SetStatusCode(404)
	}
}

// checkBody decodes a select body and counts it as bad unless it carries
// token_ids alone or the hash trio (hash arrays of equal lengths) alone,
// and the id is present exactly when wantID.
func (s *countingTestServer) checkBody(ctx *fasthttp.RequestCtx, wantID bool) bool {
	var b promptBody
	err := json.Unmarshal(ctx.PostBody(), &b)
	tokens := len(b.TokenIDs) > 0 && b.BlockHashes == nil && b.SequenceHashes == nil && b.ISLTokens == 0
	hashes := b.TokenIDs == nil && len(b.BlockHashes) == len(b.SequenceHashes) && b.ISLTokens > 0
	if string(ctx.Request.Header.ContentType()) != "application/json" || err != nil ||
		!(tokens || hashes) || (b.SelectionID != "") != wantID {
		s.mu.badBody++
		ctx.SetStatusCode(400)
		return false
	}
	return true
}

func (s *countingTestServer) calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for k, v := range s.mu.calls {
		m[k] = v
	}
	m["bad_body"] = s.mu.badBody
	m["workers"] = len(s.mu.workers)
	m["active"] = len(s.mu.active) + len(s.mu.plans)
	return m
}
