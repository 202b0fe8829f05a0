package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runHealth is `kvselect health`: one GET of a selector's /health (or
// --path), exit 0 on a 200 and 1 otherwise, so that an image without a
// shell or curl (distroless, scratch) can run its own HEALTHCHECK.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvselect health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8092", "base URL of the selector")
	path := fs.String("path", "/health", "path to GET: /health (liveness) or /ready (readiness)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	insecure := fs.Bool("insecure-skip-verify", false, "with an https URL, do not verify the certificate (a self-signed --tls-cert checked from inside its container)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvselect health: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(*url, "/")+*path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect health: %v\n", err)
		return 2
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if *insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for, for a self-signed certificate on loopback
	}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect health: %v\n", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	fmt.Fprintf(stdout, "%d %s\n", res.StatusCode, strings.TrimSpace(string(body)))
	if res.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
