package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// relayGateway is a test gateway that plays Envoy's part of GIE's
// endpoint picker protocol in FULL_DUPLEX_STREAMED, both ways
// (envoyproxy/envoy:api/envoy/service/ext_proc/v3/external_processor.proto):
// for each client request it opens one ext_proc stream to the EPP, sends
// the request headers (the protocol config on that first message) and
// the body in chunks as they are read from the client, the last one with
// end_of_stream, without waiting for an answer; it reads the pick (the
// x-gateway-destination-endpoint header mutation, checked against the
// envoy.lb metadata), forwards the request, with the body the EPP echoes,
// to the picked engine's OpenAI endpoint, then relays the engine's
// response headers and every body chunk it reads from the socket as
// response_headers and response_body messages (an empty one with
// end_of_stream when the engine's body ends, as Envoy sends it), writes
// the EPP's answers to the client, half-closes the stream and waits for
// the EPP to end it. An ImmediateResponse is answered to the client.
type relayGateway struct {
	t        *testing.T
	epp      extprocv3.ExternalProcessorClient
	srv      *httptest.Server
	up       *http.Client
	reqChunk int // bytes of a request body chunk
	seq      int
	mu       sync.Mutex
	log      []relayed
}

// relayed is what the gateway did for one request.
type relayed struct {
	dest                       string
	status                     int
	reqChunks, respChunks      int
	respBytes, clientRespBytes int
}

func newRelayGateway(t *testing.T, epp extprocv3.ExternalProcessorClient) *relayGateway {
	g := &relayGateway{t: t, epp: epp, up: &http.Client{Transport: &http.Transport{DisableCompression: true}}, reqChunk: 100}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *relayGateway) last() relayed {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log[len(g.log)-1]
}

// headerMap is Envoy's form of HTTP headers: lowercase names, raw_value.
func headerMap(pseudo [][2]string, h http.Header) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, kv := range pseudo {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	for k, vs := range h {
		for _, v := range vs {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return m
}

// apply applies an ext_proc header mutation to h.
func apply(h http.Header, m *extprocv3.HeaderMutation) {
	for _, o := range m.GetSetHeaders() {
		h.Set(o.GetHeader().GetKey(), string(o.GetHeader().GetRawValue()))
	}
	for _, k := range m.GetRemoveHeaders() {
		h.Del(k)
	}
}

func (g *relayGateway) serve(w http.ResponseWriter, r *http.Request) {
	rec := relayed{}
	defer func() {
		g.mu.Lock()
		g.log = append(g.log, rec)
		g.mu.Unlock()
	}()
	fail := func(format string, args ...any) {
		g.t.Errorf("gateway: "+format, args...)
		rec.status = http.StatusBadGateway
		http.Error(w, fmt.Sprintf(format, args...), http.StatusBadGateway)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // a stream not ended cleanly is reset, as Envoy resets it
	ps, err := g.epp.Process(ctx)
	if err != nil {
		fail("ext_proc stream: %v", err)
		return
	}
	g.mu.Lock()
	g.seq++
	reqID := fmt.Sprintf("relay-%d", g.seq)
	g.mu.Unlock()
	hdr := r.Header.Clone()
	hdr.Set("X-Request-Id", reqID) // Envoy generates one
	hdr.Set("X-Forwarded-Proto", "http")
	noBody := r.ContentLength == 0
	err = ps.Send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers:     headerMap([][2]string{{":authority", r.Host}, {":path", r.URL.RequestURI()}, {":method", r.Method}, {":scheme", "http"}}, hdr),
			EndOfStream: noBody,
		}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	})
	if err != nil {
		fail("request headers: %v", err)
		return
	}
	// The body streams to the EPP as it arrives, without waiting for an
	// answer (full duplex): this goroutine owns Send until it returns.
	type sent struct {
		chunks, bytes int
		err           error
	}
	bodySent := make(chan sent, 1)
	go func() {
		if noBody {
			bodySent <- sent{}
			return
		}
		n, err := g.sendRequestBody(ps, r.Body, r.ContentLength)
		bodySent <- sent{chunks: n, err: err}
	}()
	m, err := ps.Recv()
	if err != nil {
		fail("the pick: %v", err)
		return
	}
	if ir := m.GetImmediateResponse(); ir != nil {
		<-bodySent
		apply(w.Header(), ir.GetHeaders())
		rec.status = int(ir.GetStatus().GetCode())
		w.WriteHeader(rec.status)
		_, _ = w.Write(ir.GetBody())
		_ = ps.CloseSend()
		return
	}
	hr := m.GetRequestHeaders()
	if hr == nil {
		fail("want the request headers' answer first, got %T", m.GetResponse())
		return
	}
	upHdr := hdr.Clone()
	apply(upHdr, hr.GetResponse().GetHeaderMutation())
	rec.dest = upHdr.Get("X-Gateway-Destination-Endpoint")
	md := m.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	if rec.dest == "" || md != rec.dest {
		fail("destination header %q, metadata %q", rec.dest, md)
		return
	}
	// The upstream request's body is what the EPP echoes, chunk by chunk.
	pr, pw := io.Pipe()
	defer pr.Close()
	up, err := http.NewRequestWithContext(ctx, r.Method, "http://"+rec.dest+r.URL.RequestURI(), pr)
	if err != nil {
		fail("upstream request: %v", err)
		return
	}
	upHdr.Del("Content-Length")
	up.Header = upHdr
	type result struct {
		res *http.Response
		err error
	}
	upstream := make(chan result, 1)
	go func() {
		res, err := g.up.Do(up)
		upstream <- result{res, err}
	}()
	for !noBody {
		m, err := ps.Recv()
		if err != nil {
			_ = pw.CloseWithError(err)
			fail("request body echo: %v", err)
			return
		}
		sr := m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			_ = pw.CloseWithError(errors.New("protocol"))
			fail("want a streamed request body echo, got %T", m.GetResponse())
			return
		}
		if _, err := pw.Write(sr.GetBody()); err != nil {
			fail("upstream body: %v", err)
			return
		}
		if sr.GetEndOfStream() {
			break
		}
	}
	_ = pw.Close()
	b := <-bodySent
	if b.err != nil {
		fail("request body: %v", b.err)
		return
	}
	rec.reqChunks = b.chunks
	u := <-upstream
	if u.err != nil {
		fail("upstream %s: %v", rec.dest, u.err)
		return
	}
	defer u.res.Body.Close()
	// The response side: a sender goroutine relays what the engine
	// sends as it arrives; this one writes the EPP's answers back.
	respSent := make(chan sent, 1)
	go func() {
		n, bytes, err := g.sendResponse(ps, u.res)
		respSent <- sent{n, bytes, err}
	}()
	m, err = ps.Recv()
	if err != nil || m.GetResponseHeaders() == nil {
		fail("want the response headers' answer, got %v %v", m, err)
		return
	}
	for k, vs := range u.res.Header {
		w.Header()[k] = vs
	}
	apply(w.Header(), m.GetResponseHeaders().GetResponse().GetHeaderMutation())
	w.Header().Set("X-Test-Destination", rec.dest)
	rec.status = u.res.StatusCode
	w.WriteHeader(u.res.StatusCode)
	flusher := w.(http.Flusher)
	for {
		m, err := ps.Recv()
		if err != nil {
			fail("response body answer: %v", err)
			return
		}
		sr := m.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			fail("want a streamed response body answer, got %T", m.GetResponse())
			return
		}
		rec.clientRespBytes += len(sr.GetBody())
		if _, err := w.Write(sr.GetBody()); err != nil {
			return // the client went away: the deferred cancel resets the stream
		}
		flusher.Flush()
		if sr.GetEndOfStream() {
			break
		}
	}
	rs := <-respSent
	if rs.err != nil {
		fail("response relay: %v", rs.err)
		return
	}
	rec.respChunks, rec.respBytes = rs.chunks, rs.bytes
	if m, err := ps.Recv(); !errors.Is(err, io.EOF) {
		fail("the EPP did not end the stream after the response: %v %v", m, err)
	}
}

// sendRequestBody sends the client's body in chunks of g.reqChunk bytes,
// end_of_stream on the chunk that completes a known length, else on an
// empty chunk after the body's end.
func (g *relayGateway) sendRequestBody(ps extprocv3.ExternalProcessor_ProcessClient, body io.Reader, length int64) (chunks int, err error) {
	left := length
	for {
		buf := make([]byte, g.reqChunk)
		n, err := io.ReadFull(body, buf)
		if n > 0 {
			left -= int64(n)
			eos := length >= 0 && left == 0
			chunks++
			if err := ps.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: buf[:n], EndOfStream: eos}}}); err != nil {
				return chunks, err
			}
			if eos {
				return chunks, nil
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			chunks++
			return chunks, ps.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{EndOfStream: true}}})
		}
		if err != nil {
			return chunks, err
		}
	}
}

// sendResponse relays the engine's response: its headers, then each
// chunk one read of the socket returns, then an empty end_of_stream
// chunk, then half-closes the stream.
func (g *relayGateway) sendResponse(ps extprocv3.ExternalProcessor_ProcessClient, res *http.Response) (chunks, bytes int, err error) {
	err = ps.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap([][2]string{{":status", strconv.Itoa(res.StatusCode)}}, res.Header),
	}}})
	if err != nil {
		return 0, 0, err
	}
	for {
		buf := make([]byte, 32<<10)
		n, err := res.Body.Read(buf)
		if n > 0 {
			chunks++
			bytes += n
			if err := ps.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: buf[:n]}}}); err != nil {
				return chunks, bytes, err
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return chunks, bytes, err
		}
	}
	if err := ps.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}}); err != nil {
		return chunks, bytes, err
	}
	return chunks, bytes, ps.CloseSend()
}

// startMocker runs `kvselect mocker` with args and returns the worker
// descriptions it prints, one per engine.
func startMocker(t *testing.T, engines int, args ...string) []map[string]any {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"mocker", "-engines", strconv.Itoa(engines)}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	dec := json.NewDecoder(out)
	ws := make([]map[string]any, engines)
	for i := range ws {
		if err := dec.Decode(&ws[i]); err != nil {
			t.Fatalf("mocker printed no description %d: %v\n%s", i, err, logs.String())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return ws
}

// metricValue is the value of one series of a /metrics exposition.
func metricValue(t *testing.T, metrics, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}

// sseStream reads a completion stream: its text, its usage (prompt,
// completion, cached tokens) and whether data: [DONE] ended it.
func sseStream(t *testing.T, body io.Reader) (text string, usage [3]int, done bool) {
	t.Helper()
	usage = [3]int{-1, -1, -1}
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if payload == "[DONE]" {
			done = true
			continue
		}
		var ev struct {
			Object  string `json:"object"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Details    struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(payload), &ev); err != nil || ev.Object != "text_completion" {
			t.Fatalf("event %q: %v", payload, err)
		}
		for _, c := range ev.Choices {
			text += c.Text
		}
		if ev.Usage != nil {
			usage = [3]int{ev.Usage.Prompt, ev.Usage.Completion, ev.Usage.Details.Cached}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return text, usage, done
}

// TestEppRelayMockerEngines drives `kvselect epp --workers-file` through
// the relaying gateway against three engines of a `kvselect mocker`
// process, which publish real ZMQ KV events and answer real OpenAI
// streams. Two conversations of four turns each, as token ids, stream
// through it: a conversation's first turn lands by load; once its
// engine's KV events have shown its prompt in the EPP's index, every
// later turn is picked on that engine, which reports the previous turn's
// blocks cached (the picker breaks exact ties at random, so without the
// events a later turn would land there one time in three). A chat request that does not stream follows. Then no
// booking is left (/loads), and the EPP's prefill and output-block
// counters are what the streams carried: one prefill per request, one
// output block per 4 tokens of each response's usage.
func TestEppRelayMockerEngines(t *testing.T) {
	const bs = 4
	ws := startMocker(t, 3, "-rate", "0", "-block-size", strconv.Itoa(bs), "-served-model-name", "m", "-token-interval", "2ms")
	byEndpoint := map[string]uint64{}
	var recs []string
	for _, w := range ws {
		w["model_name"] = "m"
		ep := w["endpoint"].(string)
		if !strings.HasPrefix(ep, "http://127.0.0.1:") {
			t.Fatalf("mocker endpoint %q", ep)
		}
		byEndpoint[strings.TrimPrefix(ep, "http://")] = uint64(w["worker_id"].(float64))
		b, _ := json.Marshal(w)
		recs = append(recs, string(b))
	}
	if len(byEndpoint) != 3 {
		t.Fatalf("endpoints %v", byEndpoint)
	}
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[`+strings.Join(recs, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEppProc(t, "--workers-file", file, "--model-name", "m")
	p.eventually("the EPP subscribed to the three engines", func() bool {
		m, _ := p.get("/metrics")
		return strings.Contains(m, "kvselect_kv_listeners_connected 3")
	})
	g := newRelayGateway(t, p.client())
	client := &http.Client{Timeout: 30 * time.Second}

	// overlap is how many leading blocks of toks the EPP's index holds on
	// worker id.
	overlap := func(toks []string, id uint64) int {
		body, code := p.do("POST", "/overlap_scores", `{"model_name":"m","token_ids":[`+strings.Join(toks, ",")+`]}`)
		if code != 200 {
			t.Fatalf("/overlap_scores: %d %s", code, body)
		}
		var v struct {
			Workers []struct {
				WorkerID uint64 `json:"worker_id"`
				Device   int    `json:"device_blocks"`
			} `json:"workers"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		for _, w := range v.Workers {
			if w.WorkerID == id {
				return w.Device
			}
		}
		return 0
	}
	var requests, wantBlocks, streamedTokens int
	for c := range 2 {
		var toks []string
		owner := ""
		prevBlocks := 0
		for turn := range 4 {
			for len(toks) < 9+8*turn {
				toks = append(toks, strconv.Itoa(1000*(c+1)+len(toks)))
			}
			maxTokens := 6 + turn
			body := fmt.Sprintf(`{"model":"m","prompt":[%s],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`, strings.Join(toks, ","), maxTokens)
			res, err := client.Post(g.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			text, usage, done := sseStream(t, res.Body)
			res.Body.Close()
			dest := res.Header.Get("X-Test-Destination")
			requests++
			wantBlocks += usage[1] / bs
			streamedTokens += usage[1]
			if res.StatusCode != 200 || !done || len(text) != maxTokens || usage[0] != len(toks) || usage[1] != maxTokens {
				t.Fatalf("conversation %d turn %d: %d, text %q, usage %v, done %v", c, turn, res.StatusCode, text, usage, done)
			}
			if rec := g.last(); rec.respChunks < 2 || rec.reqChunks < 2 || rec.respBytes != rec.clientRespBytes {
				t.Fatalf("relayed %+v: want both bodies in chunks and every response byte relayed", rec)
			}
			if turn == 0 {
				owner = dest
				if usage[2] != 0 {
					t.Fatalf("conversation %d's first turn found %d tokens cached", c, usage[2])
				}
			} else if dest != owner {
				t.Fatalf("conversation %d turn %d went to %s, its earlier turns to %s", c, turn, dest, owner)
			} else if usage[2] != prevBlocks*bs {
				t.Fatalf("conversation %d turn %d: %d tokens cached at %s, want the previous turn's %d", c, turn, usage[2], dest, prevBlocks*bs)
			}
			prevBlocks = len(toks) / bs
			id, ok := byEndpoint[dest]
			if !ok {
				t.Fatalf("picked %q, no engine of the mocker", dest)
			}
			p.eventually(fmt.Sprintf("conversation %d turn %d's %d blocks in the EPP's index on worker %d", c, turn, prevBlocks, id), func() bool {
				return overlap(toks, id) == prevBlocks
			})
		}
		t.Logf("conversation %d: 4 turns on %s", c, owner)
	}

	// A chat that does not stream: one JSON body, its usage read at the end.
	res, err := client.Post(g.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":9}`))
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(res.Body).Decode(&chat)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || chat.Object != "chat.completion" || len(chat.Choices) != 1 || chat.Choices[0].Message.Content != "abcdefghi" || chat.Usage.Completion != 9 {
		t.Fatalf("chat: %d %+v %v", res.StatusCode, chat, err)
	}
	if _, ok := byEndpoint[res.Header.Get("X-Test-Destination")]; !ok {
		t.Fatalf("chat picked %q", res.Header.Get("X-Test-Destination"))
	}
	requests++
	wantBlocks += chat.Usage.Completion / bs

	p.wantTotals("no booking left once every stream ended", 0, 0, 0)
	m, _ := p.get("/metrics")
	for series, want := range map[string]int{
		"kvselect_epp_prefill_complete_total":           requests,
		"kvselect_epp_output_blocks_total":              wantBlocks,
		`kvselect_epp_frees_total{reason="complete"}`:   requests,
		`kvselect_epp_frees_total{reason="cancelled"}`:  0,
		`kvselect_epp_requests_total{outcome="routed"}`: requests,
		"kvselect_epp_active_streams":                   0,
		"kvselect_active_reservations":                  0,
	} {
		if got := metricValue(t, m, series); got != float64(want) {
			t.Errorf("%s = %v, want %d", series, got, want)
		}
	}
	g.mu.Lock()
	var reqChunks, respChunks int
	for _, r := range g.log {
		reqChunks, respChunks = reqChunks+r.reqChunks, respChunks+r.respChunks
	}
	g.mu.Unlock()
	t.Logf("%d requests relayed (%d request body chunks, %d response body chunks read from the engines), %d streamed tokens, %d output blocks",
		requests, reqChunks, respChunks, streamedTokens, wantBlocks)
}
