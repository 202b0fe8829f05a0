package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"runtime"
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
	if w.BlockSize != 4 || w.DPSize != 2 || len(w.KVEventsEndpoint) != 2 || w.ReplayEndpoint != "" {
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
	for _, args := range [][]string{{"-encoding", "xml"}, {"-hashes", "x"}, {"-engines", "0"}, {"-nope"}} {
		if c := mocker(context.Background(), args, io.Discard, io.Discard); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}
