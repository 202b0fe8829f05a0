package engines

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParseVLLM reads an exposition shaped as vLLM writes it (two engine
// cores of a data-parallel server, two lora_requests_info series of which
// the later wins, an escaped quote, families that are skipped).
func TestParseVLLM(t *testing.T) {
	b, err := os.ReadFile("testdata/vllm_metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{Running: 5, Waiting: 1, HasRunning: true, HasWaiting: true, KVUsage: 0.5, HasKVUsage: true,
		LoraRunning: []string{"sql-lora", "chat-lora"}, LoraWaiting: []string{`tool"lora`}, MaxLora: 4, HasLora: true}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if got := s.Adapters(); !reflect.DeepEqual(got, []string{"sql-lora", "chat-lora", `tool"lora`}) {
		t.Fatalf("adapters %v", got)
	}
}

func TestParseSGLangAndErrors(t *testing.T) {
	s, err := Parse([]byte("sglang:num_running_reqs{model_name=\"q\"} 7\nsglang:num_queue_reqs 2 1700000000000\nsglang:token_usage 0.5\n"))
	if err != nil || s.Running != 7 || s.Waiting != 2 || s.KVUsage != 0.5 || s.HasLora {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"vllm:num_requests_running{a=\"b\" 1", "vllm:num_requests_running x", "vllm:num_requests_running{a=b} 1", "vllm:num_requests_running"} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", bad, err)
		}
	}
	if s, err := Parse([]byte("other_family{{{ garbage\n")); err != nil || s.HasRunning {
		t.Fatalf("an unwanted family's line failed the parse: %v", err)
	}
}

// TestScraperReports: the scraper reads real HTTP servers and reports
// each target's sample or error; a body over MaxBody fails.
func TestScraperReports(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("vllm:num_requests_running 4\n"))
	}))
	defer good.Close()
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("# padding\n", 200)))
	}))
	defer big.Close()
	var mu sync.Mutex
	got := map[uint64]string{}
	s := New(Config{Interval: time.Hour, MaxBody: 1000}, func() []Target {
		return []Target{{1, good.URL + "/metrics"}, {2, "http://127.0.0.1:1/metrics"}, {3, big.URL}}
	}, func(tg Target, smp Sample, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			got[tg.ID] = "error"
		} else {
			got[tg.ID] = strings.Repeat("r", int(smp.Running))
		}
	})
	s.Once(context.Background())
	if !reflect.DeepEqual(got, map[uint64]string{1: "rrrr", 2: "error", 3: "error"}) {
		t.Fatalf("reports %v", got)
	}
	if st := s.Stats(); st.OK != 1 || st.Failed != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// FuzzParse: no input panics.
func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile("testdata/vllm_metrics.txt")
	f.Add(b)
	f.Add([]byte(`vllm:lora_requests_info{running_lora_adapters="a\`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = Parse(b) })
}
