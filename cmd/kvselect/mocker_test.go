package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

type countSink struct{ ix *radix.Index }

func (s countSink) ApplyBatch(evs []radix.Event) { s.ix.ApplyBatch(evs) }
func (s countSink) ClearRank(w radix.WorkerKey) {
	s.ix.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
}

// TestMocker runs `kvselect mocker` on free ports with two ranks, reads the
// worker description it prints, listens to both ranks, sees batches arrive,
// and stops it by cancelling (as SIGINT does).
func TestMocker(t *testing.T) {
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- mocker(ctx, []string{"-base-port", "0", "-ranks", "2", "-rate", "500", "-block-size", "4",
			"-capacity", "64", "-prefix-blocks", "4", "-suffix-blocks", "2", "-encoding", "array"}, pw, io.Discard)
		_ = pw.Close()
	}()
	var w mockWorker
	if err := json.NewDecoder(bufio.NewReader(pr)).Decode(&w); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if w.BlockSize != 4 || w.DPSize != 2 || len(w.KVEventsEndpoint) != 2 || w.ReplayEndpoint != "" || !strings.HasPrefix(w.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("worker %+v", w)
	}
	in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := radix.New(radix.Config{})
	in.Sync(w.WorkerID, w.BlockSize, []core.RankSource{
		{DPRank: 0, Endpoint: w.KVEventsEndpoint["0"]}, {DPRank: 1, Endpoint: w.KVEventsEndpoint["1"]},
	}, countSink{ix})
	deadline := time.Now().Add(10 * time.Second)
	for in.Stats().BatchesApplied < 20 || ix.Stats().Workers < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no events from the mocker: %+v", in.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = in.Close()
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d", c)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base; {
		if time.Now().After(deadline) {
			t.Fatalf("goroutine leak: %d > %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMockerBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-encoding", "xml"}, {"-hashes", "x"}, {"-engines", "0"}, {"-nope"}, {"-http-base-port", "-2"}, {"-http-base-port", "65535", "-engines", "2"}, {"-max-tokens", "0"}, {"-token-interval", "-1ms"}} {
		if c := mocker(context.Background(), args, io.Discard, io.Discard); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}

// TestMockerOpenAI: the engines of `kvselect mocker -rate 0` answer OpenAI
// completions on their HTTP endpoints, on -http-base-port + e: a request
// is served on the rank X-data-parallel-rank names, generates -max-tokens
// tokens without max_tokens, and its blocks reach that rank's listener
// over the real KV events; the same prompt again reports them cached.
// With -http-base-port -1 there is no HTTP endpoint.
func TestMockerOpenAI(t *testing.T) {
	base := runtime.NumGoroutine()
	port := 0 // two free consecutive ports: port - 1 and port
	for port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		if next, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			next.Close()
			port = p + 1
		}
		ln.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- mocker(ctx, []string{"-engines", "2", "-ranks", "2", "-rate", "0", "-block-size", "4", "-max-tokens", "5",
			"-http-base-port", fmt.Sprint(port - 1), "-served-model-name", "m"}, pw, io.Discard)
		_ = pw.Close()
	}()
	dec := json.NewDecoder(bufio.NewReader(pr))
	var ws [2]mockWorker
	for i := range ws {
		if err := dec.Decode(&ws[i]); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if ws[0].Endpoint != fmt.Sprintf("http://127.0.0.1:%d", port-1) || ws[1].Endpoint != fmt.Sprintf("http://127.0.0.1:%d", port) {
		t.Fatalf("endpoints %q %q, want ports %d and %d", ws[0].Endpoint, ws[1].Endpoint, port-1, port)
	}
	w := ws[1]
	in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := radix.New(radix.Config{})
	in.Sync(w.WorkerID, w.BlockSize, []core.RankSource{
		{DPRank: 0, Endpoint: w.KVEventsEndpoint["0"]}, {DPRank: 1, Endpoint: w.KVEventsEndpoint["1"]},
	}, countSink{ix})
	deadline := time.Now().Add(10 * time.Second)
	for in.Stats().Connected < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not subscribed: %+v", in.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	complete := func(body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", w.Endpoint+"/v1/completions", strings.NewReader(body))
		req.Header.Set("X-data-parallel-rank", "1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, v
	}
	prompt := `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`
	st, v := complete(prompt)
	if st != 200 || v["model"] != "m" || fmt.Sprint(v["choices"]) != "[map[finish_reason:length index:0 logprobs:<nil> stop_reason:<nil> text:abcde]]" ||
		fmt.Sprint(v["usage"]) != "map[completion_tokens:5 prompt_tokens:9 prompt_tokens_details:map[cached_tokens:0] total_tokens:14]" {
		t.Fatalf("completion: %d %v", st, v)
	}
	hashes := radix.LocalHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, radix.HashSeed("", ""))
	for {
		var r radix.Result
		ix.Match(hashes, &r)
		if slices.ContainsFunc(r.Matches, func(m radix.Match) bool {
			return m.Worker == radix.WorkerKey{WorkerID: w.WorkerID, DPRank: 1} && m.Device == 2
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the completion's blocks never reached rank 1's listener: %+v", r.Matches)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, v := complete(prompt); fmt.Sprint(v["usage"]) != "map[completion_tokens:5 prompt_tokens:9 prompt_tokens_details:map[cached_tokens:8] total_tokens:14]" {
		t.Fatalf("the second completion: %v", v)
	}
	if st, v := complete(`{"model":"other","prompt":[1]}`); st != 404 {
		t.Fatalf("another model: %d %v", st, v)
	}
	http.DefaultClient.CloseIdleConnections()
	_ = in.Close()
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d", c)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base; {
		if time.Now().After(deadline) {
			t.Fatalf("goroutine leak: %d > %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// -http-base-port -1: the old mock:// endpoint, no HTTP.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	pr2, pw2 := io.Pipe()
	go func() {
		code <- mocker(ctx, []string{"-rate", "0", "-http-base-port", "-1"}, pw2, io.Discard)
		_ = pw2.Close()
	}()
	var none mockWorker
	if err := json.NewDecoder(pr2).Decode(&none); err != nil || none.Endpoint != "mock://engine-0" {
		t.Fatalf("without HTTP: %+v %v", none, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr2) }()
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d", c)
	}
}
