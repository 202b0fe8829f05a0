package httpapi

import (
	stdjson "encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// selectBody returns a select body with n block hashes and n sequence
// hashes (signed 64-bit values spread over the whole range): the shape of
// a hash-path select body, 5.3 KB at n=128.
func selectBody(n int, id string) []byte {
	var b strings.Builder
	b.WriteString(`{`)
	if id != "" {
		fmt.Fprintf(&b, `"selection_id":%q,`, id)
	}
	b.WriteString(`"model_name":"model","routing_group":"default","block_hashes":[`)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		x = x*6364136223846793005 + 1442695040888963407
		b.WriteString(strconv.FormatInt(int64(x), 10))
	}
	b.WriteString(`],"sequence_hashes":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		x = x*6364136223846793005 + 1442695040888963407
		b.WriteString(strconv.FormatInt(int64(x), 10))
	}
	fmt.Fprintf(&b, `],"isl_tokens":%d}`, n*16)
	return []byte(b.String())
}

// gojsonSelect is the go-json alternative the scanner is measured against:
// the same fields, slices reused between calls (v0.12.0 keeps their
// capacity), presence by pointer.
type gojsonSelect struct {
	ModelName      string  `json:"model_name"`
	RoutingGroup   string  `json:"routing_group"`
	SelectionID    *string `json:"selection_id"`
	BlockHashes    []int64 `json:"block_hashes"`
	SequenceHashes []int64 `json:"sequence_hashes"`
	ISLTokens      *uint64 `json:"isl_tokens"`
}

// BenchmarkDecodeSelect compares the hand-written scanner with go-json
// v0.12.0 and encoding/json on the 128+128-hash select body (256 hashes,
// ~5.3 KB).
func BenchmarkDecodeSelect(b *testing.B) {
	body := selectBody(128, "sel-1")
	b.Run("scanner", func(b *testing.B) {
		var r selectReq
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := decodeSelect(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gojson", func(b *testing.B) {
		var v gojsonSelect
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			v.BlockHashes, v.SequenceHashes = v.BlockHashes[:0], v.SequenceHashes[:0]
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encodingjson", func(b *testing.B) {
		var v gojsonSelect
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			v.BlockHashes, v.SequenceHashes = v.BlockHashes[:0], v.SequenceHashes[:0]
			if err := stdjson.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchService is a service with 8 schedulable workers of 2 ranks.
func benchService(b testing.TB) *core.Service {
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	svc, err := core.New(cfg, core.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for w := range 8 {
		ep := fmt.Sprintf("http://w%d:8000", w)
		bs, dp := uint32(16), uint32(2)
		if _, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: uint64(w), ModelName: "model", WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}}); err != nil {
			b.Fatal(err)
		}
	}
	return svc
}

// BenchmarkHTTP measures whole requests through fasthttp's in-memory
// listener in one run: a no-op handler, then /select and
// /select_and_reserve on the same server with 128+128 and 256+256 hash
// bodies. Every booked id is freed in-process after its response so the
// tracker stays at one live request. allocs/op counts client and server.
func BenchmarkHTTP(b *testing.B) {
	svc := benchService(b)
	srv, err := New(svc, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	noop := []byte(`{}`)
	handler := func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/noop" {
			ctx.Response.Header.SetContentType("application/json")
			ctx.SetBody(noop)
			return
		}
		srv.Handle(ctx)
	}
	ln := fasthttputil.NewInmemoryListener()
	fs := &fasthttp.Server{Handler: handler, MaxRequestBodySize: DefaultMaxRequestBodySize, NoDefaultServerHeader: true, NoDefaultDate: true}
	go fs.Serve(ln) //nolint:errcheck
	defer ln.Close()
	client := &fasthttp.HostClient{Addr: "mem", Dial: func(string) (net.Conn, error) { return ln.Dial() }, MaxConns: 1024}

	run := func(name, path string, body func(i int) []byte, after func(i int)) {
		b.Run(name, func(b *testing.B) {
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI("http://mem" + path)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req.SetBodyRaw(body(i))
				if err := client.Do(req, res); err != nil {
					b.Fatal(err)
				}
				if res.StatusCode() != 200 {
					b.Fatalf("%d %s", res.StatusCode(), res.Body())
				}
				if after != nil {
					after(i)
				}
				i++
			}
		})
	}
	// Parallel: 64 goroutines over 64 connections, no-op first, same run.
	par := func(name, path string, body []byte, book bool) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Int64
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(res)
				req.SetRequestURI("http://mem" + path)
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.SetBodyRaw(body)
				for pb.Next() {
					if err := client.Do(req, res); err != nil {
						b.Fatal(err)
					}
					if res.StatusCode() != 200 {
						b.Fatalf("%d %s", res.StatusCode(), res.Body())
					}
					if book {
						// generated id: free it to keep one live request per goroutine
						id := res.Body()[len(`{"selection_id":"`):][:36]
						_ = svc.Free(string(id))
					}
				}
				seq.Add(1)
			})
		})
	}
	parBody := selectBody(128, "")
	par("parallel/noop", "/noop", parBody, false)
	par("parallel/select_and_reserve/256hashes", "/select_and_reserve", parBody, true)

	for _, n := range []int{128, 256} {
		bodies := make([][]byte, 1024)
		ids := make([]string, 1024)
		for i := range bodies {
			ids[i] = "bench-" + strconv.Itoa(i)
			bodies[i] = selectBody(n, ids[i])
		}
		plain := selectBody(n, "")
		run(fmt.Sprintf("noop/%dhashes", 2*n), "/noop", func(int) []byte { return plain }, nil)
		run(fmt.Sprintf("select/%dhashes", 2*n), "/select", func(int) []byte { return plain }, nil)
		run(fmt.Sprintf("select_and_reserve/%dhashes", 2*n), "/select_and_reserve",
			func(i int) []byte { return bodies[i%len(bodies)] },
			func(i int) { _ = svc.Free(ids[i%len(ids)]) })
	}
}

// handleDirect runs one request through the handler on a reused RequestCtx.
func handleDirect(srv *Server, ctx *fasthttp.RequestCtx, path string, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.SetRequestURI(path)
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyRaw(body)
	srv.Handle(ctx)
}

// TestSelectAndReserveAllocs asserts the handler's allocations for one
// /select_and_reserve with 128+128 hashes (booking included, the free done
// outside the measured function's budget is counted too) and for /select.
func TestSelectAndReserveAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	svc := benchService(t)
	srv, err := New(svc, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	body := selectBody(128, "alloc-1")
	plain := selectBody(128, "")
	for range 10 { // warm pools
		handleDirect(srv, &ctx, "/select_and_reserve", body)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		_ = svc.Free("alloc-1")
		handleDirect(srv, &ctx, "/select", plain)
	}
	booking := testing.AllocsPerRun(200, func() {
		handleDirect(srv, &ctx, "/select_and_reserve", body)
		_ = svc.Free("alloc-1")
	})
	sel := testing.AllocsPerRun(200, func() { handleDirect(srv, &ctx, "/select", plain) })
	t.Logf("allocs: select_and_reserve+free %.1f, select %.1f", booking, sel)
	if booking > 7 {
		t.Errorf("select_and_reserve allocates %.1f times per request, want <= 7 (one ledger record per booking)", booking)
	}
	if sel > 2 {
		t.Errorf("select allocates %.1f times per request, want <= 2", sel)
	}
}

// BenchmarkDecodeSelectPaired alternates the scanner and go-json on every
// iteration and reports each one's mean ns, so both see the same noise of
// a shared machine (BenchmarkDecodeSelect's sub-benchmarks run at different
// moments).
func BenchmarkDecodeSelectPaired(b *testing.B) {
	body := selectBody(128, "sel-1")
	var r selectReq
	var v gojsonSelect
	var tScan, tGo time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := decodeSelect(body, &r); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		v.BlockHashes, v.SequenceHashes = v.BlockHashes[:0], v.SequenceHashes[:0]
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		tScan += t1.Sub(t0)
		tGo += t2.Sub(t1)
	}
	b.ReportMetric(float64(tScan.Nanoseconds())/float64(b.N), "scanner-ns/op")
	b.ReportMetric(float64(tGo.Nanoseconds())/float64(b.N), "gojson-ns/op")
	b.ReportMetric(float64(tGo)/float64(tScan), "gojson/scanner")
}

// TestCodecAllocs: decoding a selection body into a warmed pooled request
// and encoding a response into a warmed buffer allocate nothing.
func TestCodecAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	body := selectBody(128, "id-1")
	var r selectReq
	if err := decodeSelect(body, &r); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = decodeSelect(body, &r) }); n != 0 {
		t.Errorf("decodeSelect allocates %v times", n)
	}
	o := core.Selection{HasSelectionID: true, SelectionID: "id-1", Booked: true, SequenceHashes: r.req.SequenceHashes, ModelName: "m", RoutingGroup: "g",
		Overlap: core.Overlap{DP: []core.RankTokens{{DPRank: 0, Tokens: 16}}}, DecodeBusyKnown: true}
	buf := appendSelection(nil, &o, nil)
	if n := testing.AllocsPerRun(100, func() { buf = appendSelection(buf[:0], &o, nil) }); n != 0 {
		t.Errorf("appendSelection allocates %v times", n)
	}
}
