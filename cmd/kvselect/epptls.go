package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"path/filepath"
	"time"
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
