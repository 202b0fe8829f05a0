package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// TestEppCertReload: with --enable-cert-reload, replacing --cert-path's
// tls.crt and tls.key (file by file, as a writer does) makes new TLS
// handshakes present the new certificate without a restart, and a client
// trusting only it picks through the port; files that do not load are
// logged and counted, and the certificate serving stays.
func TestEppCertReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.2:8000","block_size":4}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	install := func(src string) {
		t.Helper()
		for from, to := range map[string]string{"cert.pem": "tls.crt", "key.pem": "tls.key"} {
			b, err := os.ReadFile(filepath.Join(src, from))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	certA, _, _ := selfSigned(t, dirA)
	certB, _, poolB := selfSigned(t, dirB)
	derA, derB := certDER(t, certA), certDER(t, certB)
	install(dirA)
	p := startEppProc(t, "--workers-file", file, "--model-name", "m", "--kv-events=false", "--cert-path", dir, "--enable-cert-reload")
	if got := servedCert(t, p.grpc); !bytes.Equal(got, derA) {
		t.Fatal("at start the port does not serve tls.crt")
	}

	install(dirB)
	p.eventually("the new certificate served", func() bool { return bytes.Equal(servedCert(t, p.grpc), derB) })
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.grpc), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: poolB})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dest, _, cancel := eppPick(t, extprocv3.NewExternalProcessorClient(conn), `{"model":"m","prompt":[1,2,3,4,5]}`); dest != "127.0.0.2:8000" {
		t.Fatalf("verified against the new certificate only: picked %q", dest)
	} else {
		cancel()
	}

	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not a PEM block\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.eventually("the bad pair counted", func() bool {
		return p.metric("kvselect_epp_cert_reload_errors_total") == "1"
	})
	if got := servedCert(t, p.grpc); !bytes.Equal(got, derB) {
		t.Fatal("a bad pair replaced the certificate serving")
	}
	if n := p.metric("kvselect_epp_cert_reloads_total"); n != "1" {
		t.Fatalf("reloads %q, want 1", n)
	}
	if !strings.Contains(p.logs.String(), "does not load") {
		t.Fatalf("the bad pair is not logged:\n%s", p.logs.String())
	}
}

// certDER is the DER of a PEM certificate file's first block.
func certDER(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	return blk.Bytes
}

// servedCert shakes hands with the TLS port (h2, unverified, as the
// gateway) and returns the leaf certificate it presents.
func servedCert(t *testing.T, port int) []byte {
	t.Helper()
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

// TestCertReloaderPoll drives the reloader's polls by hand: a pair is
// tried only once it stayed the same for one poll, so a certificate
// written without its key yet, left so, is one refused pair (counted
// once, however many polls see it) and the key's arrival then loads the
// new pair; garbage and missing files are refused with the pair serving
// kept; going back to the serving pair's content is no change.
func TestCertReloaderPoll(t *testing.T) {
	dir, dirA, dirB := t.TempDir(), t.TempDir(), t.TempDir()
	certA, keyA, _ := selfSigned(t, dirA)
	certB, keyB, _ := selfSigned(t, dirB)
	put := func(name, from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put("tls.crt", certA)
	put("tls.key", keyA)
	r, err := newCertReloader(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.tlsConfig(&tls.Config{MinVersion: tls.VersionTLS12})
	serving := func() []byte {
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	derA, derB := certDER(t, certA), certDER(t, certB)
	check := func(step string, want []byte, reloads, errs uint64) {
		t.Helper()
		if !bytes.Equal(serving(), want) || r.reloads.Load() != reloads || r.errors.Load() != errs {
			t.Fatalf("%s: serving A %v B %v, reloads %d errors %d; want reloads %d errors %d", step, bytes.Equal(serving(), derA), bytes.Equal(serving(), derB), r.reloads.Load(), r.errors.Load(), reloads, errs)
		}
	}
	now := time.Now()
	r.poll(now)
	check("unchanged", derA, 0, 0)
	put("tls.crt", certB)
	r.poll(now)
	check("the new certificate seen once", derA, 0, 0)
	r.poll(now)
	r.poll(now)
	check("the certificate without its key, stable", derA, 0, 1)
	put("tls.key", keyB)
	r.poll(now)
	check("the key seen once", derA, 0, 1)
	r.poll(now)
	check("the pair stable", derB, 1, 1)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.poll(now)
	r.poll(now)
	r.poll(now)
	check("garbage", derB, 1, 2)
	put("tls.crt", certB)
	put("tls.key", keyB)
	r.poll(now)
	r.poll(now)
	check("back to the serving pair", derB, 1, 2)
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	r.poll(now)
	r.poll(now)
	check("a missing key", derB, 1, 3)
}
