package kubetest

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// API is a protocol-level fake of kube-apiserver for the two
// resources the source reads: GET list and watch of
// /api/v1/namespaces/{ns}/pods and
// /apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools, as
// client-go's reflectors use them (no kube-apiserver can run on this
// machine). What it speaks:
//
//   - a bearer token (401 without it);
//   - labelSelector and fieldSelector (metadata.name, metadata.namespace)
//     on lists and watches; a watched object that starts or stops matching
//     arrives as ADDED or DELETED, as the watch cache sends it;
//   - lists carrying metadata.resourceVersion (limit is ignored: one page);
//   - watches as chunked JSON event lines, {"type", "object"}: from a
//     resourceVersion the events after it (an older version than the
//     oldest kept gives one ERROR event, a 410 Expired Status), with ""
//     or "0" the current objects first as ADDED; with
//     sendInitialEvents=true (a streaming list, client-go's WatchListClient)
//     the current objects as ADDED, then a BOOKMARK annotated
//     k8s.io/initial-events-end, unless noWatchList makes it answer 422 as
//     an API server without the feature does; timeoutSeconds ends a watch;
//   - restarts: every watch dropped, every older resource version expired.
//
// Every object has a resourceVersion from one counter, as etcd's revision.
type API struct {
	srv   *httptest.Server
	token string

	// NoWatchList: refuse streaming lists (422), so reflectors list.
	NoWatchList atomic.Bool
	// Down: answer every request 503 (the server is restarting).
	Down atomic.Bool
	// Expire: answer every watch from a resource version 410 Expired.
	Expire atomic.Bool

	// Lists, Streams (streaming lists) and watches served; refused
	// (503 while down) and expired (410) answers.
	Lists, Streams, Watches, Refused, Expired atomic.Int64

	mu struct {
		sync.Mutex
		rv    int64
		minRV int64 // the oldest version a watch may start from
		// objs[resource][ns/name] is the object as stored.
		objs map[string]map[string]map[string]any
		// history are the events after minRV, in version order.
		history []fakeEvent
		live    map[*fakeWatch]struct{}
		// queries records every list and watch query, for assertions.
		queries []string
	}
}

type fakeEvent struct {
	rv       int64
	resource string
	typ      string
	obj, old map[string]any // old: the object before a MODIFIED
}

// fakeWatch is one open watch. ch carries encoded event lines; closing
// done ends the response.
type fakeWatch struct {
	resource, ns string
	sel          labels.Selector
	fsel         fields.Selector
	ch           chan []byte
	done         chan struct{}
	once         sync.Once
}

func (w *fakeWatch) stop() { w.once.Do(func() { close(w.done) }) }

// kinds maps a resource to its apiVersion and kind.
var fakeKinds = map[string][2]string{
	"pods":           {"v1", "Pod"},
	"inferencepools": {"inference.networking.k8s.io/v1", "InferencePool"},
}

// NewAPI starts the server over TLS (its certificate is
// httptest's, for 127.0.0.1).
func NewAPI(t testing.TB) *API {
	a := &API{token: "kvselect-test-token"}
	a.mu.objs = map[string]map[string]map[string]any{"pods": {}, "inferencepools": {}}
	a.mu.live = map[*fakeWatch]struct{}{}
	a.mu.rv = 100
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(func() {
		a.DropWatches()
		a.srv.Close()
	})
	return a
}

// Kubeconfig writes a kubeconfig naming the server and its CA, the token
// and namespace ns, and returns its path. (Over TLS: client-go reads a
// kubeconfig's credentials only for a TLS server.)
func (a *API) Kubeconfig(t testing.TB, ns string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kvselect
  user:
    token: %s
contexts:
- name: fake
  context:
    cluster: fake
    user: kvselect
    namespace: %s
current-context: fake
`, a.srv.URL, base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})), a.token, ns)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(statusObj(code, reason, msg))
}

func statusObj(code int, reason, msg string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code}
}

// route returns the resource and namespace of a request path.
func route(path string) (resource, ns string, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(path, "/api/v1/namespaces/"):
		rest = strings.TrimPrefix(path, "/api/v1/namespaces/")
	case strings.HasPrefix(path, "/apis/inference.networking.k8s.io/v1/namespaces/"):
		rest = strings.TrimPrefix(path, "/apis/inference.networking.k8s.io/v1/namespaces/")
	default:
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 2 {
		return "", "", false
	}
	if _, known := fakeKinds[parts[1]]; !known || (parts[1] == "pods") != strings.HasPrefix(path, "/api/v1/") {
		return "", "", false
	}
	return parts[1], parts[0], true
}

func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	if a.Down.Load() {
		a.Refused.Add(1)
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is restarting")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+a.token {
		status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	resource, ns, ok := route(r.URL.Path)
	if !ok || r.Method != http.MethodGet {
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "unable to parse requirement: "+err.Error())
		return
	}
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	a.mu.Lock()
	a.mu.queries = append(a.mu.queries, resource+"?"+r.URL.RawQuery)
	a.mu.Unlock()
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		a.watch(w, r, &fakeWatch{resource: resource, ns: ns, sel: sel, fsel: fsel})
		return
	}
	a.Lists.Add(1)
	a.mu.Lock()
	items := []any{}
	for _, o := range a.sortedLocked(resource) {
		if matches(o, ns, sel, fsel) {
			items = append(items, o)
		}
	}
	list := map[string]any{
		"kind": fakeKinds[resource][1] + "List", "apiVersion": fakeKinds[resource][0],
		"metadata": map[string]any{"resourceVersion": strconv.FormatInt(a.mu.rv, 10)},
		"items":    items,
	}
	b, _ := json.Marshal(list)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (a *API) sortedLocked(resource string) []map[string]any {
	keys := slices.Sorted(maps.Keys(a.mu.objs[resource]))
	out := make([]map[string]any, len(keys))
	for i, k := range keys {
		out[i] = a.mu.objs[resource][k]
	}
	return out
}

// Meta is an object's metadata map, for editing it in place.
func Meta(o map[string]any) map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

func matches(o map[string]any, ns string, sel labels.Selector, fsel fields.Selector) bool {
	if o == nil {
		return false
	}
	m := Meta(o)
	if m["namespace"] != ns {
		return false
	}
	lbl := labels.Set{}
	if l, ok := m["labels"].(map[string]any); ok {
		for k, v := range l {
			lbl[k], _ = v.(string)
		}
	}
	name, _ := m["name"].(string)
	return sel.Matches(lbl) && fsel.Matches(fields.Set{"metadata.name": name, "metadata.namespace": ns})
}

// line encodes one watch event.
func line(typ string, obj map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "object": obj})
	return append(b, '\n')
}

// eventFor is what watch fw sees of ev: nothing, or one event line.
func (fw *fakeWatch) eventFor(ev fakeEvent) []byte {
	if ev.resource != fw.resource {
		return nil
	}
	now := matches(ev.obj, fw.ns, fw.sel, fw.fsel)
	was := matches(ev.old, fw.ns, fw.sel, fw.fsel)
	switch {
	case ev.typ == "DELETED" && now, ev.typ == "ADDED" && now:
		return line(ev.typ, ev.obj)
	case ev.typ == "MODIFIED" && now && was:
		return line("MODIFIED", ev.obj)
	case ev.typ == "MODIFIED" && now:
		return line("ADDED", ev.obj)
	case ev.typ == "MODIFIED" && was:
		return line("DELETED", ev.obj)
	}
	return nil
}

// watch serves one watch request.
func (a *API) watch(w http.ResponseWriter, r *http.Request, fw *fakeWatch) {
	a.Watches.Add(1)
	q := r.URL.Query()
	fw.ch, fw.done = make(chan []byte, 4096), make(chan struct{})
	a.mu.Lock()
	switch rv := q.Get("resourceVersion"); {
	case q.Get("sendInitialEvents") == "true":
		if a.NoWatchList.Load() {
			a.mu.Unlock()
			status(w, http.StatusUnprocessableEntity, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
			return
		}
		a.Streams.Add(1)
		for _, o := range a.sortedLocked(fw.resource) {
			if matches(o, fw.ns, fw.sel, fw.fsel) {
				fw.ch <- line("ADDED", o)
			}
		}
		fw.ch <- line("BOOKMARK", map[string]any{
			"kind": fakeKinds[fw.resource][1], "apiVersion": fakeKinds[fw.resource][0],
			"metadata": map[string]any{
				"resourceVersion": strconv.FormatInt(a.mu.rv, 10),
				"annotations":     map[string]any{"k8s.io/initial-events-end": "true"},
			},
		})
	case rv == "" || rv == "0":
		for _, o := range a.sortedLocked(fw.resource) {
			if matches(o, fw.ns, fw.sel, fw.fsel) {
				fw.ch <- line("ADDED", o)
			}
		}
	default:
		from, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || from < a.mu.minRV || a.Expire.Load() {
			minRV := a.mu.minRV // read under the lock: Restart writes it
			a.mu.Unlock()
			a.Expired.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(line("ERROR", statusObj(http.StatusGone, "Expired", fmt.Sprintf("too old resource version: %s (%d)", rv, minRV))))
			return
		}
		for _, ev := range a.mu.history {
			if ev.rv > from {
				if b := fw.eventFor(ev); b != nil {
					fw.ch <- b
				}
			}
		}
	}
	a.mu.live[fw] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.mu.live, fw)
		a.mu.Unlock()
	}()

	var timeout <-chan time.Time
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = time.After(time.Duration(s) * time.Second)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	for {
		select {
		case b := <-fw.ch:
			if _, err := w.Write(b); err != nil {
				return
			}
			flusher.Flush()
		case <-fw.done:
			return
		case <-timeout:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// record stores obj (or deletes the object when typ is DELETED) at a new
// version and sends the event to the live watches.
func (a *API) record(resource, typ string, obj map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.rv++
	m := Meta(obj)
	m["resourceVersion"] = strconv.FormatInt(a.mu.rv, 10)
	key := m["namespace"].(string) + "/" + m["name"].(string)
	old := a.mu.objs[resource][key]
	switch {
	case typ == "DELETED":
		delete(a.mu.objs[resource], key)
	case old == nil:
		typ = "ADDED"
		a.mu.objs[resource][key] = obj
	default:
		typ = "MODIFIED"
		a.mu.objs[resource][key] = obj
	}
	ev := fakeEvent{rv: a.mu.rv, resource: resource, typ: typ, obj: obj, old: old}
	a.mu.history = append(a.mu.history, ev)
	for fw := range a.mu.live {
		if b := fw.eventFor(ev); b != nil {
			select {
			case fw.ch <- b:
			default: // a watcher too slow: the server ends its watch
				fw.stop()
			}
		}
	}
}

// clone deep-copies a JSON-like object.
func clone(o map[string]any) map[string]any {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}

// Put creates or replaces an object (a copy of obj).
func (a *API) Put(resource string, obj map[string]any) {
	obj = clone(obj)
	if _, ok := fakeKinds[resource]; !ok {
		panic("API: unknown resource " + resource)
	}
	obj["apiVersion"], obj["kind"] = fakeKinds[resource][0], fakeKinds[resource][1]
	a.record(resource, "", obj)
}

// Remove deletes the object ns/name; its last state is the DELETED event's.
func (a *API) Remove(resource, ns, name string) {
	a.mu.Lock()
	o, ok := a.mu.objs[resource][ns+"/"+name]
	a.mu.Unlock()
	if !ok {
		panic("API: no " + resource + " " + ns + "/" + name)
	}
	a.record(resource, "DELETED", clone(o))
}

// DropWatches ends every open watch (connections reset by a restart).
func (a *API) DropWatches() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for fw := range a.mu.live {
		fw.stop()
	}
}

// Restart models a restarted API server whose watch cache starts anew:
// every watch ends, changes made meanwhile (missed) reach no watch, and a
// watch from any version before the restart's end is expired, so the
// reflectors must relist to see them.
func (a *API) Restart(missed func()) {
	a.Expire.Store(true)
	a.DropWatches()
	a.mu.Lock()
	for fw := range a.mu.live {
		delete(a.mu.live, fw)
	}
	a.mu.Unlock()
	missed()
	a.mu.Lock()
	a.mu.minRV = a.mu.rv
	a.mu.history = nil
	a.mu.Unlock()
	a.Expire.Store(false)
}

// QueriesOf returns the queries made of resource so far.
func (a *API) QueriesOf(resource string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, q := range a.mu.queries {
		if r, rest, _ := strings.Cut(q, "?"); r == resource {
			out = append(out, rest)
		}
	}
	return out
}

// PodObj is a pod object: name, uid, IP ("" none), Ready condition,
// labels.
func PodObj(ns, name, uid, ip string, ready bool, lbl map[string]string) map[string]any {
	l := map[string]any{}
	for k, v := range lbl {
		l[k] = v
	}
	cond := "False"
	if ready {
		cond = "True"
	}
	st := map[string]any{
		"phase":      "Running",
		"conditions": []any{map[string]any{"type": "Ready", "status": cond}, map[string]any{"type": "PodScheduled", "status": "True"}},
	}
	if ip != "" {
		st["podIP"] = ip
		st["podIPs"] = []any{map[string]any{"ip": ip}}
	}
	return map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "labels": l, "creationTimestamp": "2026-01-01T00:00:00Z"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "engine", "image": "vllm"}}},
		"status":   st,
	}
}

// PoolObj is an InferencePool selecting matchLabels on the target ports.
func PoolObj(ns, name string, matchLabels map[string]string, ports ...int) map[string]any {
	ml := map[string]any{}
	for k, v := range matchLabels {
		ml[k] = v
	}
	tps := []any{}
	for _, p := range ports {
		tps = append(tps, map[string]any{"number": int64(p)})
	}
	return map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": "pool-" + name},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": ml},
			"targetPorts":       tps,
			"endpointPickerRef": map[string]any{"name": "kvselect-epp", "port": map[string]any{"number": 9002}},
		},
	}
}
