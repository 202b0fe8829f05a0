package httpapi_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCatalogChangesLogged: every catalog change over HTTP is one log
// line (an incomplete worker a warning with its reasons); a failed change
// and a read log nothing.
func TestCatalogChangesLogged(t *testing.T) {
	var logs lockedBuf
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	h.want(h.do("POST", "/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1:8000","block_size":16}`), 201)
	h.want(h.do("POST", "/workers", `{"worker_id":2,"model_name":"m"}`), 201)
	h.want(h.do("PATCH", "/workers/1", `{"total_kv_blocks":100}`), 200)
	h.want(h.do("DELETE", "/workers/1", ""), 200)
	h.want(h.do("DELETE", "/workers/9", ""), 404)
	h.want(h.do("GET", "/workers", ""), 200)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=INFO msg="worker upserted" source=http worker_id=1 model_name=m routing_group=default lifecycle=schedulable endpoint=http://w1:8000`,
		`level=WARN msg="worker upserted" source=http worker_id=2 model_name=m routing_group=default lifecycle=incomplete reasons="endpoint is required; block_size must be greater than 0"`,
		`level=INFO msg="worker patched" source=http worker_id=1`,
		`level=INFO msg="worker removed" source=http worker_id=1 model_name=m routing_group=default lifecycle=unschedulable`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
}
