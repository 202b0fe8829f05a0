package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestEppDemo runs `kvselect epp --demo 2` as the README shows it: two
// simulated engines publish real KV events, and a prompt over the tokens
// only engine 1 caches (1..8 blocks of 16) is picked there over ext_proc,
// whatever the body's model (--demo targets its own).
func TestEppDemo(t *testing.T) {
	p := startEppProc(t, "--demo", "2")
	if r := p.must("GET", "/ready", "", 200); !strings.Contains(r, `"schedulable_workers":2`) {
		t.Fatalf("/ready: %s", r)
	}
	ids := make([]string, 8*16)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	dest, _, cancel := eppPick(t, p.client(), `{"model":"any","prompt":[`+strings.Join(ids, ",")+`]}`)
	defer cancel()
	if dest != "127.0.0.1:8000" {
		t.Fatalf("the demo's cached prompt picked %q, want engine 1 (127.0.0.1:8000)", dest)
	}
	if l := p.must("GET", "/loads", "", 200); !strings.Contains(l, `"worker_id":1,"dp_rank":0,"potential_prefill_tokens"`) {
		t.Fatalf("/loads: %s", l)
	}
}
