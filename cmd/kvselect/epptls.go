package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/perf"
)

// eppTLS is the ext_proc port's TLS configuration, as GIE's EPP serves it
// (llm-d/llm-d-router:pkg/epp/server/options.go: --secure-serving, on by
// default; --cert-path, a directory holding tls.crt and tls.key, else a
// self-signed certificate made at start-up). Gateways connect to the
// picker over TLS without verifying it (GIE's manifests); the health port
// stays plaintext, for the kubelet's gRPC probes.
func eppTLS(certPath string) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if certPath != "" {
		cert, err = tls.LoadX509KeyPair(filepath.Join(certPath, "tls.crt"), filepath.Join(certPath, "tls.key"))
	} else {
		cert, err = eppSelfSigned()
	}
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}, nil
}

// eppSelfSigned makes a P-256 certificate for the process's life (a year at
// most), as GIE's EPP does without --cert-path.
func eppSelfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"kvselect"}, CommonName: "kvselect-epp"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// certReloadPoll is how often --enable-cert-reload reads --cert-path's
// files.
const certReloadPoll = time.Second

// certReloader is GIE's --enable-cert-reload
// (kubernetes-sigs/gateway-api-inference-extension:pkg/common/certs.go,
// there with fsnotify and a 250 ms debounce): the ext_proc port's
// certificate follows --cert-path's tls.crt and tls.key without a
// restart. Instead of watching, poll reads both files every
// certReloadPoll (no dependency for it; a Kubernetes Secret volume swaps
// its ..data symlink, which reading through the names follows), and a
// pair is tried once it has stayed the same for one poll, so a pair
// written file by file is not tried half-written. The pair serving is an
// atomic pointer that every new handshake reads (GetCertificate); a pair
// that does not load is logged and counted once, and the serving one
// stays. Connections already open keep the certificate they shook hands
// with.
type certReloader struct {
	dir string
	log *slog.Logger
	cur atomic.Pointer[tls.Certificate]
	// poll's own state (the node's loop calls it from one goroutine):
	// loaded is the serving pair's content, seen the content read at the
	// previous poll when it differed, tried whether seen was tried.
	loaded, seen certFiles
	tried        bool
	// reloads and errors count the pairs loaded and the ones refused.
	reloads, errors atomic.Uint64
}

// certFiles is what one poll read: the two files' bytes, or why not.
type certFiles struct {
	crt, key []byte
	err      string
}

func (a certFiles) equal(b certFiles) bool {
	return a.err == b.err && bytes.Equal(a.crt, b.crt) && bytes.Equal(a.key, b.key)
}

// newCertReloader loads dir's pair, which must load, and serves it.
func newCertReloader(dir string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{dir: dir, log: log}
	f := r.read()
	cert, err := f.pair()
	if err != nil {
		return nil, err
	}
	r.cur.Store(&cert)
	r.loaded = f
	return r, nil
}

func (r *certReloader) read() certFiles {
	var f certFiles
	var err error
	if f.crt, err = os.ReadFile(filepath.Join(r.dir, "tls.crt")); err == nil {
		f.key, err = os.ReadFile(filepath.Join(r.dir, "tls.key"))
	}
	if err != nil {
		f = certFiles{err: err.Error()}
	}
	return f
}

func (f certFiles) pair() (tls.Certificate, error) {
	if f.err != "" {
		return tls.Certificate{}, errors.New(f.err)
	}
	return tls.X509KeyPair(f.crt, f.key)
}

// tlsConfig is base (eppTLS's) serving the reloaded pair.
func (r *certReloader) tlsConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.Certificates = nil
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.cur.Load(), nil }
	return c
}

// poll reads the files; a content that changed is tried at the next poll
// if it is still the same then.
func (r *certReloader) poll(time.Time) {
	f := r.read()
	switch {
	case f.equal(r.loaded):
		r.seen, r.tried = certFiles{}, false
		return
	case !f.equal(r.seen):
		r.seen, r.tried = f, false
		return
	case r.tried:
		return // refused already; waiting for another change
	}
	r.tried = true
	cert, err := f.pair()
	if err != nil {
		// Logged before it is counted: a caller that sees the count finds the line.
		r.log.Error("--cert-path changed to a pair that does not load: the previous certificate keeps serving", "cert_path", r.dir, "err", err)
		r.errors.Add(1)
		return
	}
	r.cur.Store(&cert)
	r.loaded, r.seen, r.tried = f, certFiles{}, false
	r.reloads.Add(1)
	attrs := []any{"cert_path", r.dir}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	r.log.Info("TLS certificate reloaded: new handshakes use it", attrs...)
}

var certReloadDescs = []perf.Desc{
	{Name: "kvselect_epp_cert_reloads_total", Kind: perf.Counter, Help: "Certificate pairs --enable-cert-reload loaded from --cert-path after start-up."},
	{Name: "kvselect_epp_cert_reload_errors_total", Kind: perf.Counter, Help: "Changed --cert-path pairs that did not load (unreadable, not PEM, or a key not matching the certificate); the previous pair kept serving."},
}

func (r *certReloader) write(w io.Writer) {
	perf.WriteCounter(w, "kvselect_epp_cert_reloads_total", r.reloads.Load())
	perf.WriteCounter(w, "kvselect_epp_cert_reload_errors_total", r.errors.Load())
}
