package bench

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// route is one HTTP call of an operation.
type route uint8

const (
	routeSelect      route = iota // POST /select
	routeReserve                  // POST /select_and_reserve
	routePrefill                  // POST /reservations/{id}/prefill_complete
	routeOutput                   // POST /reservations/{id}/output_block
	routeDelete                   // DELETE /reservations/{id}
	routePlan                     // POST /disagg/plan
	routePlanPrefill              // POST /disagg/{id}/prefill_complete
	routePlanDelete               // DELETE /disagg/{id}
	routeEPP                      // one ext_proc stream (MixEPP)
	nRoutes
)

var routeNames = [nRoutes]string{"select", "select_and_reserve", "prefill_complete", "output_block", "delete",
	"disagg_plan", "disagg_prefill_complete", "disagg_delete", "epp_stream"}

// selection reports whether r is an operation's first call, the one that
// selects (and books): its latency is also recorded apart, and in the open
// loop it is timed from the intended send time.
func (r route) selection() bool {
	return r == routeSelect || r == routeReserve || r == routePlan || r == routeEPP
}

func (r route) String() string { return routeNames[r] }

// caller makes one call of an operation and returns the HTTP status (0 with
// a non-nil error when there was no response). It is owned by one client
// goroutine. body is the prompt's Body for the selection routes
// (route.selection) and nil otherwise; id is the selection id for every
// route but routeSelect. The
// caller must not retain id or body after returning.
type caller interface {
	call(r route, id, body []byte) (status int, err error)
}

// overlapReader is implemented by a caller that can read the overlap of the
// selection response it received last: overlap.gpu, the prompt tokens the
// chosen worker's device already holds (found false when the response has
// none, e.g. an error body).
type overlapReader interface {
	overlapTokens() (tokens int64, found bool)
}

// target is a selector (or the no-op baseline) reached over one fasthttp
// HostClient that all client goroutines share.
type target struct {
	name   string // "selector" or "noop"
	base   string // "http://host:port[/prefix]"
	hc     *fasthttp.HostClient
	prefix string
}

// newTarget builds a HostClient for base with room for conns connections:
// fasthttp's default of 512 per host would make goroutines beyond it fail
// with ErrNoFreeConns instead of measuring anything.
func newTarget(name, base string, conns int, timeout time.Duration) (*target, error) {
	hostport, prefix, err := splitTarget(base)
	if err != nil {
		return nil, err
	}
	return &target{
		name: name, base: base, prefix: prefix,
		hc: &fasthttp.HostClient{
			Addr:                     hostport,
			Name:                     "kvselect-bench",
			NoDefaultUserAgentHeader: true,
			MaxConns:                 conns,
			// A selection's response (it echoes sequence_hashes) is
			// 5 to 12 KB: fasthttp's 4 KiB reader took two or three read
			// syscalls for it where a client with a larger buffer (an
			// asyncio or Go net/http client reads 32 to 64 KiB at a
			// time) takes one, and the client shares the machine with
			// the server it measures.
			ReadBufferSize:         16 << 10,
			ReadTimeout:            timeout,
			WriteTimeout:           timeout,
			MaxIdleConnDuration:    time.Minute,
			MaxResponseBodySize:    64 << 20,
			DisablePathNormalizing: true,
		},
	}, nil
}

// close drops the idle connections.
func (t *target) close() { t.hc.CloseIdleConnections() }

// httpCaller is the caller over a target. Its buffers are reused call after
// call; the request body is set raw (not copied), which is safe because Do
// has finished with it when call returns.
type httpCaller struct {
	t    *target
	req  *fasthttp.Request
	resp *fasthttp.Response
	uri  []byte
	body []byte
}

func (t *target) newCaller() *httpCaller {
	return &httpCaller{t: t, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
}

// release returns the request and response to fasthttp's pools.
func (c *httpCaller) release() {
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
	c.req, c.resp = nil, nil
}

var (
	bodyEmptyObject = []byte("{}")
	selectionIDKey  = []byte(`{"selection_id":"`)
)

func (c *httpCaller) call(r route, id, body []byte) (int, error) {
	req := c.req
	req.Reset()
	u := append(c.uri[:0], "http://"...)
	u = append(u, c.t.hc.Addr...)
	u = append(u, c.t.prefix...)
	method := fasthttp.MethodPost
	switch r {
	case routeSelect:
		u = append(u, "/select"...)
		req.SetBodyRaw(body)
	case routeReserve:
		u = append(u, "/select_and_reserve"...)
		b := append(c.body[:0], selectionIDKey...)
		b = append(b, id...)
		b = append(b, '"', ',')
		b = append(b, body[1:]...)
		c.body = b
		req.SetBodyRaw(b)
	case routePrefill:
		u = append(append(append(u, "/reservations/"...), id...), "/prefill_complete"...)
	case routeOutput:
		u = append(append(append(u, "/reservations/"...), id...), "/output_block"...)
		req.SetBodyRaw(bodyEmptyObject)
	case routeDelete:
		u = append(append(u, "/reservations/"...), id...)
		method = fasthttp.MethodDelete
	case routePlan:
		u = append(u, "/disagg/plan"...)
		b := append(c.body[:0], selectionIDKey...)
		b = append(b, id...)
		b = append(b, planGroups...)
		b = append(b, body[1:]...)
		c.body = b
		req.SetBodyRaw(b)
	case routePlanPrefill:
		u = append(append(append(u, "/disagg/"...), id...), "/prefill_complete"...)
	case routePlanDelete:
		u = append(append(u, "/disagg/"...), id...)
		method = fasthttp.MethodDelete
	default:
		panic("BUG: bench: unknown route")
	}
	c.uri = u
	req.Header.SetMethod(method)
	if len(req.Body()) > 0 {
		req.Header.SetContentType("application/json")
	}
	req.SetRequestURIBytes(u)
	if err := c.t.hc.Do(req, c.resp); err != nil {
		return 0, err
	}
	return c.resp.StatusCode(), nil
}

// overlapTokens reads overlap.gpu from the last response (see
// overlapReader).
func (c *httpCaller) overlapTokens() (int64, bool) { return overlapGPU(c.resp.Body()) }

var gpuKey = []byte(`"gpu":`)

// overlapGPU returns the number after the last `"gpu":` in a selection
// response. The key occurs once, in the overlap object near the end (after
// the echoed sequence_hashes of a booking), so the search runs from the end.
func overlapGPU(b []byte) (int64, bool) {
	i := bytes.LastIndex(b, gpuKey)
	if i < 0 {
		return 0, false
	}
	var n int64
	j := i + len(gpuKey)
	start := j
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int64(b[j]-'0')
	}
	return n, j > start
}

// errorClass is the key under which a failed call is counted: the status
// code for an HTTP error, else a short name of the transport error.
func errorClass(status int, err error) string {
	switch {
	case err == nil:
		return strconv.Itoa(status)
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		return "timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no_free_conns"
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "conn_closed"
	default:
		return "transport"
	}
}

// ctl makes one control-plane call (registration, /ready, /loads) and
// returns the status and a copy of the response body.
func (t *target) ctl(method, path string, body []byte, timeout time.Duration) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + t.hc.Addr + t.prefix + path)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	if err := t.hc.DoTimeout(req, resp, timeout); err != nil {
		return 0, nil, fmt.Errorf("bench: %s %s %s: %w", t.name, method, path, err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}
