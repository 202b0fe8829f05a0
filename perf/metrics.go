package perf

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// LatencyBuckets are the upper bounds, in seconds, of the request latency
// histograms: 1 µs doubling to about 4.2 s (23 buckets). These series are
// kvselect's own: Dynamo's router-overhead histograms
// (dynamo_router_overhead_*_ms) have other names, milliseconds and buckets
// from 0.1 µs, so dashboards built for Dynamo do not read them.
var LatencyBuckets = metrics.ExponentialBuckets(1e-6, 2, 23)

// Codes are the HTTP statuses a route counter is pre-created for; any other
// status is counted under "other".
var Codes = [...]int{200, 201, 400, 401, 404, 405, 409, 413, 415, 422, 429, 500, 503}

// Registry is a metric set with pre-created handles and the descriptions
// (HELP, TYPE) of its families.
type Registry struct {
	set   *metrics.Set
	mu    sync.Mutex      // guards descs
	descs map[string]Desc // by family name
}

// The library's metadata is on (process-wide; perf is its only user), so
// that the families it writes itself (histograms, the Go runtime and
// process metrics) carry their TYPE; WritePrometheus rewrites every
// family's metadata (expo.go). The Write* helpers below write bare lines.
func init() { metrics.ExposeMetadata(true) }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{set: metrics.NewSet(), descs: map[string]Desc{}}
	r.Describe(
		Desc{"kvselect_http_requests_total", Counter, "HTTP requests answered, by route and status code (\"other\" for a status without its own series)."},
		Desc{"kvselect_http_request_duration_seconds", Histogram, "Time from a request's dispatch to its response, by route."},
	)
	return r
}

// Route holds the handles of one HTTP route: a request counter per status
// and a latency histogram.
type Route struct {
	byCode  [len(Codes)]*metrics.Counter
	other   *metrics.Counter
	latency *metrics.PrometheusHistogram
}

// Route creates the handles of route name (the label value, e.g. "/select").
// Call once per route at start-up.
func (r *Registry) Route(name string) *Route {
	rt := &Route{}
	for i, c := range Codes {
		rt.byCode[i] = r.set.NewCounter(fmt.Sprintf(`kvselect_http_requests_total{route=%q,code="%d"}`, name, c))
	}
	rt.other = r.set.NewCounter(fmt.Sprintf(`kvselect_http_requests_total{route=%q,code="other"}`, name))
	rt.latency = r.set.NewPrometheusHistogramExt(fmt.Sprintf(`kvselect_http_request_duration_seconds{route=%q}`, name), LatencyBuckets)
	return rt
}

// Observe counts one request with its status and latency. Allocation-free.
func (rt *Route) Observe(status int, d time.Duration) {
	c := rt.other
	for i, code := range Codes {
		if code == status {
			c = rt.byCode[i]
			break
		}
	}
	c.Inc()
	rt.latency.Update(d.Seconds())
}

// Counter creates a counter handle with the full metric name (labels
// included).
func (r *Registry) Counter(name string) *metrics.Counter { return r.set.NewCounter(name) }

// OnScrape registers f to write extra lines at every exposition (domain
// Stats turned into gauges and counters); use the Write* helpers.
func (r *Registry) OnScrape(f func(w io.Writer)) { r.set.RegisterMetricsWriter(f) }

// WritePrometheus writes the registry, then the Go runtime and process
// metrics, in the Prometheus text format, every family once under its
// # HELP and # TYPE (writeGrouped).
func (r *Registry) WritePrometheus(w io.Writer) {
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	metrics.WriteProcessMetrics(&b)
	r.writeGrouped(w, b.Bytes())
}

// WriteGauge writes one gauge line (its family's metadata comes from
// Describe).
func WriteGauge(w io.Writer, name string, v float64) {
	writeLine(w, name, strconv.FormatFloat(v, 'g', -1, 64))
}

// WriteGaugeUint writes one gauge line of an integer value, printed exactly
// (WriteGauge prints large values in exponent form).
func WriteGaugeUint(w io.Writer, name string, v uint64) {
	writeLine(w, name, strconv.FormatUint(v, 10))
}

// WriteCounter writes one counter line.
func WriteCounter(w io.Writer, name string, v uint64) { writeLine(w, name, strconv.FormatUint(v, 10)) }

func writeLine(w io.Writer, name, value string) { _, _ = io.WriteString(w, name+" "+value+"\n") }

// Label returns name{key="value"} for a scrape-time line.
func Label(name, key, value string) string {
	return name + "{" + key + "=" + strconv.Quote(value) + "}"
}

// SetContentionProfiling sets the mutex profile fraction and the block
// profile rate (ns) the pprof mutex and block profiles sample with; 0 turns
// either off (the runtime default).
func SetContentionProfiling(mutexFraction, blockRateNs int) {
	runtime.SetMutexProfileFraction(mutexFraction)
	runtime.SetBlockProfileRate(blockRateNs)
}
