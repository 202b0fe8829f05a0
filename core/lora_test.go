package core

import (
	"slices"
	"testing"
)

// loraEnv is a service of three one-rank workers without KV events; worker
// 2 serves adapter "a" by its record.
func loraEnv(t *testing.T, opts Options) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		ep, bs := "http://w", uint32(16)
		f := WorkerFields{Endpoint: &ep, BlockSize: &bs}
		if id == 2 {
			f.LoraAdapters = []string{"a", "a"}
		}
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, WorkerFields: f}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// picks returns the workers 30 selections of req land on.
func picks(t *testing.T, s *Service, req SelectRequest) []uint64 {
	t.Helper()
	var out Selection
	var got []uint64
	for range 30 {
		if err := s.Select(&req, &out); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got, out.WorkerID) {
			got = append(got, out.WorkerID)
		}
	}
	slices.Sort(got)
	return got
}

// TestLoraNarrowing pins the reference's narrowing rules
// (narrow_allowed_worker_ids_by_lora) over the built-in sources.
func TestLoraNarrowing(t *testing.T) {
	s := loraEnv(t, Options{})
	req := func(lora string) SelectRequest {
		r := hashReq(4)
		r.LoraName = lora
		return r
	}
	// The loads are equal (nothing is booked): without narrowing a
	// request lands anywhere.
	if got := picks(t, s, req("")); len(got) < 2 {
		t.Fatalf("no LoRA: %v, want a spread", got)
	}
	if got := picks(t, s, req("a")); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("lora a: %v, want [2]", got)
	}
	// Nobody serves b: unchanged.
	if got := picks(t, s, req("b")); len(got) < 2 {
		t.Fatalf("lora b: %v, want a spread", got)
	}
	// Within the allow-set; none there serves a: the allow-set as it was.
	r := req("a")
	r.AllowedWorkerIDs, r.HasAllowedWorkerIDs = []uint64{2, 3}, true
	if got := picks(t, s, r); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("lora a in {2,3}: %v", got)
	}
	r.AllowedWorkerIDs = []uint64{1, 3}
	if got := picks(t, s, r); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("lora a in {1,3}: %v, want the allow-set", got)
	}
	// A pin inside the universe stays a candidate.
	r = req("a")
	r.PinnedWorker = &WorkerKey{WorkerID: 1}
	if got := picks(t, s, r); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("lora a pinned to 1: %v", got)
	}
	// The engine's report is the second source; the record's stays.
	if !s.SetEngineAdapters(3, []string{"b", "a"}) || s.SetEngineAdapters(9, []string{"a"}) {
		t.Fatal("SetEngineAdapters: known worker refused or unknown accepted")
	}
	if got := picks(t, s, req("b")); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("lora b after the engine report: %v", got)
	}
	if got := picks(t, s, req("a")); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("lora a after the engine report: %v", got)
	}
	s.SetEngineAdapters(3, nil)
	if got := picks(t, s, req("b")); len(got) < 2 {
		t.Fatalf("lora b after the report cleared: %v", got)
	}
	// A PATCH replaces the record's list; [] clears it.
	if _, err := s.PatchWorker(2, &WorkerPatch{LoraAdapters: []string{}}); err != nil {
		t.Fatal(err)
	}
	if got := picks(t, s, req("a")); len(got) < 2 {
		t.Fatalf("lora a after the PATCH: %v", got)
	}
}

// onlyFilter is a host filter naming fixed workers.
type onlyFilter []uint64

func (f onlyFilter) WorkersForLora(_ string, _ []uint64, dst []uint64) []uint64 {
	return append(dst, f...)
}

// TestLoraHostFilter: a host's filter replaces the built-in sources and
// can only narrow: ids outside the universe are ignored.
func TestLoraHostFilter(t *testing.T) {
	s := loraEnv(t, Options{LoraFilter: onlyFilter{3, 99, 3}})
	r := hashReq(4)
	r.LoraName = "x"
	if got := picks(t, s, r); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("filtered: %v, want [3]", got)
	}
	r.AllowedWorkerIDs, r.HasAllowedWorkerIDs = []uint64{1, 2}, true
	if got := picks(t, s, r); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("filter outside the allow-set: %v, want the allow-set", got)
	}
}

// TestLoraSelectAllocs: narrowing allocates nothing on a warm path.
func TestLoraSelectAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	s := loraEnv(t, Options{})
	r := hashReq(16)
	r.LoraName = "a"
	var out Selection
	for range 5 {
		_ = s.Select(&r, &out)
	}
	if n := testing.AllocsPerRun(200, func() { _ = s.Select(&r, &out) }); n != 0 {
		t.Fatalf("a LoRA Select allocates %v times", n)
	}
}
