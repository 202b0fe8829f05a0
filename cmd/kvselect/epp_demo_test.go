package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestEppDemo runs `kvselect epp --demo 2` as the README shows it: two
// simulated engines publish real KV events, and a prompt over the tokens
// only engine 1 caches (1..8 blocks of 16) is picked there over ext_proc,
// whatever the body's model (--demo targets its own). Engine 1 answers
// the completion at the picked address (127.0.0.1:8000, or the free port
// registered when 8000 is taken), its whole prompt cached.
func TestEppDemo(t *testing.T) {
	p := startEppProc(t, "--demo", "2")
	if r := p.must("GET", "/ready", "", 200); !strings.Contains(r, `"schedulable_workers":2`) {
		t.Fatalf("/ready: %s", r)
	}
	eps := workerEndpoints(t, p.must("GET", "/workers", "", 200))
	if len(eps) != 2 || !strings.HasPrefix(eps[1], "http://127.0.0.1:") || !strings.HasPrefix(eps[2], "http://127.0.0.") {
		t.Fatalf("endpoints %v", eps)
	}
	if eps[1] != "http://127.0.0.1:8000" && !strings.Contains(p.logs.String(), "serving and registering a free port instead") {
		t.Fatalf("engine 1 at %s, not 127.0.0.1:8000, and no fallback logged:\n%s", eps[1], p.logs.String())
	}
	ids := make([]string, 8*16)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	body := `{"model":"any","prompt":[` + strings.Join(ids, ",") + `],"max_tokens":3}`
	dest, _, cancel := eppPick(t, p.client(), body)
	defer cancel()
	if "http://"+dest != eps[1] {
		t.Fatalf("the demo's cached prompt picked %q, want engine 1 (%s)", dest, eps[1])
	}
	if l := p.must("GET", "/loads", "", 200); !strings.Contains(l, `"worker_id":1,"dp_rank":0,"potential_prefill_tokens"`) {
		t.Fatalf("/loads: %s", l)
	}
	res, err := http.Post("http://"+dest+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Model string `json:"model"`
		Usage struct {
			Details struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != 200 {
		t.Fatalf("completion at %s: %d %v", dest, res.StatusCode, err)
	}
	if v.Model != "any" || v.Usage.Details.CachedTokens != 128 {
		t.Fatalf("completion at engine 1: %+v, want its 128 tokens cached", v)
	}
}

// workerEndpoints reads GET /workers: each worker's endpoint by id.
func workerEndpoints(t *testing.T, body string) map[uint64]string {
	t.Helper()
	type rec struct {
		WorkerID uint64 `json:"worker_id"`
		Endpoint string `json:"endpoint"`
	}
	var list []rec
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		var wrapped struct {
			Workers []rec `json:"workers"`
		}
		if err := json.Unmarshal([]byte(body), &wrapped); err != nil {
			t.Fatalf("/workers %s: %v", body, err)
		}
		list = wrapped.Workers
	}
	out := map[uint64]string{}
	for _, r := range list {
		out[r.WorkerID] = r.Endpoint
	}
	return out
}
