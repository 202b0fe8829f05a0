package httpapi_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

type accessLine struct {
	TS, TraceID, Method, Path, Model string
	Status                           int
	DurationMS                       *float64 `json:"duration_ms"`
}

func readAccessLog(t *testing.T, path string) []accessLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []accessLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 7 {
			t.Fatalf("line %q: %v (want 7 fields)", sc.Text(), err)
		}
		var l accessLine
		_ = json.Unmarshal(sc.Bytes(), &l)
		l.TraceID, _ = raw["trace_id"].(string)
		out = append(out, l)
	}
	return out
}

// TestIndexerAccessLog: with an access log the indexer writes one JSON
// line per request as the reference does (ts, trace_id, method, path as
// the route, model, status, duration_ms), and POST /reopen_logs reopens
// the file after a rotation.
func TestIndexerAccessLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	if _, err := httpapi.NewAccessLog(path, "bad header", false); err == nil || !strings.Contains(err.Error(), "invalid --trace-id-header") {
		t.Fatalf("bad header name: %v", err)
	}
	al, err := httpapi.NewAccessLog(path, "x-trace-id", false)
	if err != nil {
		t.Fatal(err)
	}
	h := startIndexer(t, func(_ *core.IndexerConfig, c *httpapi.Config) { c.AccessLog = al })
	req, _ := http.NewRequest("POST", h.base+"/query", strings.NewReader(`{"token_ids":[1,2,3,4],"model_name":"m"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Trace-Id", "tr-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	h.call("GET", "/nope", "")
	h.call("GET", "/workers", "")
	// Rotate: move the file away, reopen, and the next lines go to a new
	// file at the path.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	h.want("POST", "/reopen_logs", "", 200, `{"status":"ok"}`)
	h.call("GET", "/health", "")
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	old, cur := readAccessLog(t, path+".1"), readAccessLog(t, path)
	if len(old) != 3 || len(cur) != 2 {
		t.Fatalf("%d lines before the rotation (want 3), %d after (want 2: reopen_logs, health)", len(old), len(cur))
	}
	q := old[0]
	if q.TraceID != "tr-1" || q.Method != "POST" || q.Path != "/query" || q.Model != "m" || q.Status != 404 || q.DurationMS == nil || !strings.HasSuffix(q.TS, "Z") {
		t.Fatalf("query line %+v", q)
	}
	if u := old[1]; u.Path != "unknown" || u.Status != 404 || u.TraceID != "-" || u.Model != "-" {
		t.Fatalf("unmatched line %+v", u)
	}
	if cur[0].Path != "/reopen_logs" || cur[1].Path != "/health" || cur[1].Status != 200 {
		t.Fatalf("after the rotation %+v", cur)
	}
}
