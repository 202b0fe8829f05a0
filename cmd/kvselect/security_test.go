package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// (PEM) into dir and returns their paths and the certificate's pool.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kvselect test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLSAndBearerToken runs serve with --tls-cert/--tls-key (a
// certificate made here) and --auth-token-file: HTTPS works with the
// certificate trusted, plain HTTP on the port is not served, the token
// (trailing newline trimmed) opens the protected routes, /health, /ready
// and /metrics need none, and the token never reaches the log.
func TestServeTLSAndBearerToken(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	const token = "kvs-9f8e7d6c5b4a"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan bound, 1)
	done := make(chan int, 1)
	var logs syncBuf
	go func() {
		done <- serve(ctx, []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--tls-cert", certFile, "--tls-key", keyFile, "--auth-token-file", tokenFile},
			envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), &logs, ready)
	}()
	var addr string
	select {
	case b := <-ready:
		addr = b.http
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	call := func(method, path, authz, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s over TLS: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.TLS == nil {
			t.Fatalf("%s %s: not TLS", method, path)
		}
		return res.StatusCode, string(b)
	}
	if status, body := call("GET", "/health", "", ""); status != 200 || body != `{"status":"ok"}` {
		t.Fatalf("/health over TLS: %d %s", status, body)
	}
	if status, _ := call("GET", "/ready", "", ""); status != 503 {
		t.Fatalf("/ready without workers: %d", status)
	}
	if status, _ := call("GET", "/metrics", "", ""); status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	if status, body := call("POST", "/workers", "", `{"worker_id":1,"endpoint":"http://w","block_size":4}`); status != 401 || !strings.Contains(body, "bearer token") {
		t.Fatalf("POST /workers without a token: %d %s", status, body)
	}
	for _, wrong := range []string{token[:len(token)-1], token + "x", strings.ToUpper(token)} {
		if status, body := call("POST", "/workers", "Bearer "+wrong, `{"worker_id":1,"endpoint":"http://w","block_size":4}`); status != 401 {
			t.Fatalf("a wrong token %q: %d %s", wrong, status, body)
		}
	}
	if status, body := call("POST", "/workers", "Bearer "+token, `{"worker_id":1,"endpoint":"http://w","block_size":4}`); status != 201 {
		t.Fatalf("POST /workers with the token: %d %s", status, body)
	}
	if status, _ := call("GET", "/ready", "", ""); status != 200 {
		t.Fatalf("/ready: %d", status)
	}
	// Plain HTTP to the TLS port gets no HTTP answer from kvselect.
	if res, err := http.Get("http://" + addr + "/health"); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Fatalf("plain HTTP served on the TLS port: %s", b)
		}
	}
	// An untrusted certificate is refused by the client.
	if _, err := http.Get("https://" + addr + "/health"); err == nil {
		t.Fatal("the self-signed certificate was accepted without being trusted")
	}
	client.CloseIdleConnections()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, logs.String())
	}
	if strings.Contains(logs.String(), token) {
		t.Fatalf("the token is in the log: %s", logs.String())
	}
	if !strings.Contains(logs.String(), "url=https://") {
		t.Fatalf("log: %s", logs.String())
	}
}

// TestSecurityFlagErrors: the TLS flags go together and must load, the
// token file must exist and hold a token; the errors never quote it.
func TestSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty, newline, spaced := write("empty", ""), write("newline", "\n"), write("spaced", "abc def\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", certFile, "--tls-key", certFile}, "--tls-cert/--tls-key"},
		{[]string{"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", keyFile}, "--tls-cert/--tls-key"},
		{[]string{"--auth-token-file", empty}, "the file is empty"},
		{[]string{"--auth-token-file", newline}, "the file is empty"},
		{[]string{"--auth-token-file", spaced}, "holds a space"},
		{[]string{"--auth-token-file", filepath.Join(dir, "missing")}, "--auth-token-file"},
	} {
		_, err := parseServe(tc.args, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "abc def") {
			t.Errorf("%v: the error quotes the token: %v", tc.args, err)
		}
	}
	o, err := parseServe([]string{"--auth-token-file", write("crlf", "tok\r\n"), "--tls-cert", certFile, "--tls-key", keyFile}, envOf(nil), io.Discard)
	if err != nil || string(o.http.AuthToken) != "tok" || o.http.TLS == nil || len(o.http.TLS.Certificates) != 1 {
		t.Fatalf("valid flags: %v", err)
	}
}
