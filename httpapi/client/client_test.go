package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvselect/kvselect/httpapi/client"
)

func newClient(t *testing.T, base string, o client.Options) *client.Client {
	t.Helper()
	c, err := client.New(base, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestErrorsCarryStatusAndMessage: every error class of the server comes
// back as an *Error with the status and the reference's message, and
// matches its class with errors.Is and no other.
func TestErrorsCarryStatusAndMessage(t *testing.T) {
	base, stop := startSelector()
	defer stop()
	ctx := context.Background()
	c := newClient(t, base, client.Options{})
	classes := []error{client.ErrBadRequest, client.ErrUnauthorized, client.ErrNotFound, client.ErrConflict, client.ErrOverloaded, client.ErrNotReady, client.ErrInternal}
	check := func(err error, status int, class error, msg string) {
		t.Helper()
		var e *client.Error
		if !errors.As(err, &e) || e.StatusCode != status || e.Message != msg {
			t.Fatalf("got %v, want %d %q", err, status, msg)
		}
		for _, cl := range classes {
			if errors.Is(err, cl) != (cl == class) {
				t.Errorf("%v: errors.Is(%v) = %v", err, cl, !(cl == class))
			}
		}
	}
	_, err := c.Select(ctx, &client.SelectRequest{Prompt: client.Prompt{TokenIDs: []uint32{1, 2, 3, 4}}})
	check(err, 503, client.ErrNotReady, "no schedulable workers are available")
	if _, err := c.UpsertWorker(ctx, &client.Worker{WorkerID: 1, WorkerFields: client.WorkerFields{Endpoint: ptr("http://w1"), BlockSize: ptr(uint32(4))}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Select(ctx, &client.SelectRequest{Prompt: client.Prompt{BlockHashes: []int64{1}, SequenceHashes: []int64{1, 2}, ISLTokens: 8}})
	check(err, 400, client.ErrBadRequest, "block_hashes length 1 must match sequence_hashes length 2")
	check(c.Free(ctx, "nope"), 404, client.ErrNotFound, "reservation nope not found")
	req := &client.SelectRequest{SelectionID: "dup", Prompt: client.Prompt{TokenIDs: []uint32{1, 2, 3, 4}}}
	if _, err := c.SelectAndReserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err = c.SelectAndReserve(ctx, req)
	check(err, 409, client.ErrConflict, "selection dup is already reserved or being reserved")
	// An id with a slash and spaces travels escaped.
	if _, err := c.SelectAndReserve(ctx, &client.SelectRequest{SelectionID: "tenant/a b", Prompt: client.Prompt{TokenIDs: []uint32{1}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(ctx, "tenant/a b"); err != nil {
		t.Fatalf("free of an id with a slash: %v", err)
	}
}

// TestReadyAndAuth: Ready reports not-ready from the server's 503 body,
// the bearer token is sent, and a wrong one is ErrUnauthorized.
func TestReadyAndAuth(t *testing.T) {
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"error":"missing or invalid bearer token"}`))
			return
		}
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"ready":false,"schedulable_workers":0,"workers":[]}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	r, err := newClient(t, srv.URL, client.Options{Token: "s3cret"}).Ready(ctx)
	if err != nil || r.Ready || seen.Load() != "Bearer s3cret" {
		t.Fatalf("ready %+v, %v, auth %v", r, err, seen.Load())
	}
	_, err = newClient(t, srv.URL, client.Options{Token: "wrong"}).Ready(ctx)
	if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "missing or invalid bearer token") {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := client.New("localhost:8092", client.Options{}); err == nil {
		t.Fatal("a base URL without a scheme was accepted")
	}
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestConnectionsArePooled: 200 calls one after another, errors and
// large bodies included, use one connection; 8 goroutines calling at once
// use at most MaxConnsPerHost.
func TestConnectionsArePooled(t *testing.T) {
	big := `{"block_size":4,"num_blocks":0,"workers":[],"shared_cache":{"enabled":false,"total_hit_blocks":0,"ranges":[],"error":null},"pad":"` + strings.Repeat("x", 1<<16) + `"}`
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/overlap_scores":
			_, _ = w.Write([]byte(big))
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		default:
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":"reservation x not found"}`))
		}
	})
	srv := httptest.NewUnstartedServer(h)
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	ctx := context.Background()
	c := newClient(t, srv.URL, client.Options{MaxConnsPerHost: 2})
	for i := range 200 {
		var err error
		switch i % 3 {
		case 0:
			err = c.Health(ctx)
		case 1:
			_, err = c.OverlapScores(ctx, &client.QueryRequest{})
		default:
			if err = c.Free(ctx, "x"); errors.Is(err, client.ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := ln.n.Load(); n != 1 {
		t.Fatalf("%d connections for 200 sequential calls, want 1", n)
	}
	done := make(chan error, 8)
	for range 8 {
		go func() {
			var err error
			for range 50 {
				if err = c.Health(ctx); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := ln.n.Load(); n > 2 {
		t.Fatalf("%d connections with MaxConnsPerHost 2", n)
	}
}
