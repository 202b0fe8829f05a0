package bench

import (
	"reflect"
	"testing"
)

// TestSyntheticPresets: the agent preset interleaves tool-call answers and
// tool-result turns; a tool result follows a short answer of the same
// conversation; the chat preset and the default have no tool turns, and
// the default's prompts are what they were before tool turns existed (no
// extra random draws).
func TestSyntheticPresets(t *testing.T) {
	agent, ok := SyntheticPreset("agent", 600)
	if !ok || agent.Validate() != nil {
		t.Fatalf("agent preset %+v", agent)
	}
	ps := Synthetic(agent, 16, 5)
	last := map[int]*Prompt{}
	tools := 0
	for i := range ps {
		p := &ps[i]
		if p.ToolResult {
			tools++
			prev := last[p.Conversation]
			if prev == nil || prev.OutputTokens > agent.ToolCallMax || p.ISL-prev.ISL-prev.OutputTokens < agent.ToolMin {
				t.Fatalf("tool turn %d does not follow a tool call: %+v after %+v", i, p, prev)
			}
		}
		last[p.Conversation] = p
	}
	if tools < len(ps)/2 {
		t.Fatalf("%d tool turns of %d", tools, len(ps))
	}
	chat, _ := SyntheticPreset("chat", 100)
	for _, p := range Synthetic(chat, 16, 5) {
		if p.ToolResult {
			t.Fatal("a chat turn carries a tool result")
		}
	}
	if _, ok := SyntheticPreset("nope", 1); ok {
		t.Fatal("unknown preset accepted")
	}
	cfg := DefaultConfig()
	cfg.Workload = "synthetic:agent"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Workload = "synthetic:nope"
	if cfg.Validate() == nil {
		t.Fatal("unknown preset workload accepted")
	}
}

// TestRepeatTrace: copies follow one another by the span plus a mean gap,
// with their own hash ids.
func TestRepeatTrace(t *testing.T) {
	recs := []TraceRecord{
		{Timestamp: 100, InputLength: 10, OutputLength: 1, HashIDs: []uint64{0, 1}},
		{Timestamp: 300, InputLength: 10, OutputLength: 1, HashIDs: []uint64{0, 5}},
	}
	got := RepeatTrace(recs, 3)
	if len(got) != 6 {
		t.Fatalf("%d records", len(got))
	}
	// Span 200 plus the mean gap 200: copies start 400 ms apart; ids
	// offset by 6 (largest 5, plus 1).
	if got[2].Timestamp != 500 || got[5].Timestamp != 1100 || !reflect.DeepEqual(got[3].HashIDs, []uint64{6, 11}) || !reflect.DeepEqual(got[4].HashIDs, []uint64{12, 13}) {
		t.Fatalf("copies %+v", got)
	}
	if !reflect.DeepEqual(recs[1].HashIDs, []uint64{0, 5}) {
		t.Fatal("the input was modified")
	}
	if len(RepeatTrace(recs, 1)) != 2 {
		t.Fatal("one copy")
	}
}
