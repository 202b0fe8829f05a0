package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TestEppTLS: as GIE's picker, `kvselect epp` serves ext_proc over TLS by
// default (a self-signed certificate; the gateway does not verify it), so
// a plaintext client gets nothing; --cert-path serves the directory's
// tls.crt, which a client trusting it verifies; --secure-serving=false
// is plaintext. The health port is plaintext throughout (TestEppProcess).
func TestEppTLS(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.2:8000","block_size":4}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--workers-file", file, "--model-name", "m", "--kv-events=false"}
	body := `{"model":"m","prompt":[1,2,3,4,5]}`
	def := startEppProc(t, common...)
	if dest, _, cancel := eppPick(t, def.client(), body); dest != "127.0.0.2:8000" {
		t.Fatalf("over TLS: picked %q", dest)
	} else {
		cancel()
	}
	if err := plaintextStream(def.grpc); err == nil {
		t.Fatal("a plaintext client was answered on the default (TLS) port")
	}

	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	for from, to := range map[string]string{certFile: "tls.crt", keyFile: "tls.key"} {
		if err := os.Rename(from, filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	own := startEppProc(t, append(common, "--cert-path", dir)...)
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", own.grpc), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dest, _, cancel := eppPick(t, extprocv3.NewExternalProcessorClient(conn), body); dest != "127.0.0.2:8000" {
		t.Fatalf("with --cert-path, verified: picked %q", dest)
	} else {
		cancel()
	}

	plain := startEppProc(t, append(common, "--secure-serving=false")...)
	if err := plaintextStream(plain.grpc); err != nil {
		t.Fatalf("--secure-serving=false: %v", err)
	}
}

// plaintextStream opens an ext_proc stream on port without TLS and sends
// its request headers: the error of the first answer, nil if one came.
func plaintextStream(port int) error {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return err
	}
	hdr := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}}}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr, EndOfStream: true}}}); err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}
