package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// rawConn is one client connection spoken to by hand (no pooling, no
// retries), so the test sees exactly what the server did with it.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// get sends GET path and reads the whole response.
func (c *rawConn) get(path string) (*http.Response, string, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: kvselect\r\n\r\n"); err != nil {
		return nil, "", err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b), err
}

// TestConnectionCap: with MaxConnections set, the connections over the cap
// are answered 503 with a JSON error and Connection: close, the admitted
// ones keep being served, a closed connection frees its place, and the
// metrics show the limit, the open connections and the rejections.
func TestConnectionCap(t *testing.T) {
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.MaxConnections = 4 })
	var held []*rawConn
	for range 4 {
		c := dialRaw(t, h.base)
		if res, body, err := c.get("/health"); err != nil || res.StatusCode != 200 {
			t.Fatalf("admitted connection: %v %v %s", err, res, body)
		}
		held = append(held, c)
	}
	for range 3 {
		res, body, err := dialRaw(t, h.base).get("/health")
		if err != nil {
			t.Fatalf("a connection over the cap got no answer: %v", err)
		}
		if res.StatusCode != 503 || !res.Close || res.Header.Get("Content-Type") != "application/json" ||
			body != `{"error":"too many open connections: the limit is 4"}` {
			t.Fatalf("over the cap: %d close=%v %q %s", res.StatusCode, res.Close, res.Header.Get("Content-Type"), body)
		}
	}
	for _, c := range held {
		if res, _, err := c.get("/health"); err != nil || res.StatusCode != 200 {
			t.Fatalf("a held connection stopped serving: %v %v", err, res)
		}
	}
	held[0].Close()
	// The server notices the close asynchronously: retry until a new
	// connection is admitted (each refused attempt is one more rejection).
	rejected := 3
	for attempt := 0; ; attempt++ {
		res, body, err := dialRaw(t, h.base).get("/metrics")
		if err == nil && res.StatusCode == 200 {
			for _, want := range []string{"kvselect_http_connections_max 4\n", "kvselect_http_connections_open 4\n",
				"kvselect_http_connection_rejecters_max 16\n", "kvselect_http_max_request_body_bytes 8388608\n", "kvselect_http_draining 0\n"} {
				if !strings.Contains(body, want) {
					t.Fatalf("metrics lack %q", want)
				}
			}
			if !strings.Contains(body, "kvselect_http_connections_rejected_total ") || strings.Contains(body, "kvselect_http_connections_rejected_total 0\n") {
				t.Fatalf("rejections not counted (%d expected at least)", rejected)
			}
			return
		}
		rejected++
		if attempt == 400 {
			t.Fatalf("no connection admitted after one was closed: %v %v", err, res)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShutdownDeadline: a request still in the handler when Shutdown's
// context ends is cut: Shutdown closes its connection and returns the
// context's error, instead of waiting for it.
func TestShutdownDeadline(t *testing.T) {
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	// The slow request: a booking whose clock read blocks until the test
	// ends (the service reads its clock when it books).
	var block atomic.Bool
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	clock := func() time.Time {
		if block.Load() {
			<-gate
		}
		return time.Now()
	}
	svc, err := core.New(cfg, core.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w1", uint32(4)
	if _, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: 1, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	block.Store(true)
	srv, err := httpapi.New(svc, httpapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	slow := dialRaw(t, base)
	body := `{"selection_id":"slow","token_ids":[1,2,3,4]}`
	if _, err := fmt.Fprintf(slow, "POST /select_and_reserve HTTP/1.1\r\nHost: kvselect\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	// Wait until the server holds both connections (the slow one and the
	// one asking), so the slow request is in the server's hands.
	probe := dialRaw(t, base)
	for attempt := 0; ; attempt++ {
		_, body, err := probe.get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(body, "kvselect_http_connections_open 2\n") {
			break
		}
		if attempt == 400 {
			t.Fatal("the slow connection was never admitted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a request in flight past the deadline: %v", err)
	}
	if res, err := http.ReadResponse(slow.r, nil); err == nil {
		t.Fatalf("the cut request got a response: %d", res.StatusCode)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestConnectionTimeouts: through a real server, a keep-alive connection
// idle past IdleTimeout is closed, a request whose headers stop arriving
// is cut at ReadTimeout, a connection that keeps sending requests more
// often than IdleTimeout stays open past every bound, and the closes are
// counted in kvselect_http_connections_timed_out_total.
func TestConnectionTimeouts(t *testing.T) {
	const idle, read = 200 * time.Millisecond, 400 * time.Millisecond
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.IdleTimeout, hc.ReadTimeout = idle, read })

	closedWithin := func(c *rawConn, began time.Time, bound time.Duration) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.r.ReadByte(); err == nil {
			t.Fatal("the server sent bytes instead of closing")
		}
		if took := time.Since(began); took < bound || took > bound+2*time.Second {
			t.Fatalf("closed after %v, want just past %v", took, bound)
		}
	}

	idleConn := dialRaw(t, h.base)
	if res, _, err := idleConn.get("/health"); err != nil || res.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, res)
	}
	closedWithin(idleConn, time.Now(), idle)

	slow := dialRaw(t, h.base)
	began := time.Now()
	if _, err := io.WriteString(slow, "GET /health HTTP/1.1\r\nHost: kv"); err != nil {
		t.Fatal(err)
	}
	closedWithin(slow, began, read)

	busy := dialRaw(t, h.base)
	for end := time.Now().Add(3 * read); time.Now().Before(end); time.Sleep(idle / 4) {
		if res, _, err := busy.get("/health"); err != nil || res.StatusCode != 200 {
			t.Fatalf("a connection in use was closed: %v %v", err, res)
		}
	}
	_, body, err := busy.get("/metrics")
	if err != nil || !strings.Contains(body, "kvselect_http_connections_timed_out_total 2\n") {
		t.Fatalf("timed-out connections not counted as 2: %v\n%s", err, body)
	}
}
