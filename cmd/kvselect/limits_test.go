//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDefaultMaxConnections(t *testing.T) {
	for nofile, want := range map[uint64]int{0: 672, 64: 16, 150: 16, 256: 96, 1024: 672, 65536: 49056, 1 << 40: 1 << 20} {
		if got := defaultMaxConnections(nofile); got != want {
			t.Errorf("nofile %d: %d, want %d", nofile, got, want)
		}
	}
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil || o.http.MaxConnections != defaultMaxConnections(openFileLimit()) {
		t.Fatalf("default --max-connections: %v %d", err, o.http.MaxConnections)
	}
	if o, err := parseServe([]string{"--max-connections", "0"}, envOf(nil), io.Discard); err != nil || o.http.MaxConnections != 0 {
		t.Fatalf("--max-connections 0: %v", err)
	}
	if _, err := parseServe([]string{"--max-connections", "-2"}, envOf(nil), io.Discard); err == nil {
		t.Fatal("negative --max-connections accepted")
	}
}

// fdChildEnv marks the re-executed test binary that runs serve under a low
// descriptor limit; its value is "run" followed by the serve flags.
const fdChildEnv = "KVSELECT_FD_CHILD"

// childNofile is the child's RLIMIT_NOFILE: the default cap is then
// (256 - 128) * 3/4 = 96 connections.
const childNofile = 256

// TestServeSurvivesDescriptorExhaustion runs `kvselect serve` in a child
// process whose RLIMIT_NOFILE is 256 (this process's limit is not
// touched), opens 400 idle connections to it, and checks that it keeps
// serving: with the default --max-connections the connections over the
// cap are answered 503 (or closed) and the rest are served; with a cap
// above the descriptor limit, accept fails with EMFILE and is retried
// instead of ending the server (fasthttp treats it as permanent: serve
// exited 1). Once the idle connections are gone, a new one is served and
// the metrics count the rejections or retries; the child exits 0 on
// shutdown.
func TestServeSurvivesDescriptorExhaustion(t *testing.T) {
	if args, ok := strings.CutPrefix(os.Getenv(fdChildEnv), "run"); ok {
		fdChild(strings.Fields(args))
		return
	}
	t.Run("default cap", func(t *testing.T) {
		c := startFDChild(t)
		conns := c.openIdle(t, 400)
		var ok, rejected, closed int
		for _, rc := range conns {
			res, body, err := rc.get("/health")
			switch {
			case err != nil:
				closed++ // closed unanswered: the rejecters were busy
			case res.StatusCode == 200:
				ok++
			case res.StatusCode == 503 && res.Close && body == `{"error":"too many open connections: the limit is 96"}`:
				rejected++
			default:
				t.Fatalf("connection answered %d %s", res.StatusCode, body)
			}
		}
		t.Logf("400 connections: %d served, %d answered 503, %d closed", ok, rejected, closed)
		if ok == 0 || ok > 96 || rejected == 0 {
			t.Fatalf("%d served (cap 96), %d answered 503", ok, rejected)
		}
		closeAll(conns)
		metrics := c.waitServing(t)
		if !strings.Contains(metrics, "kvselect_http_connections_max 96\n") || strings.Contains(metrics, "kvselect_http_connections_rejected_total 0\n") {
			t.Fatalf("metrics: %s", grepLines(metrics, "kvselect_http_conn"))
		}
		c.stop(t)
	})
	t.Run("cap above the descriptor limit", func(t *testing.T) {
		c := startFDChild(t, "--max-connections", "100000")
		conns := c.openIdle(t, 400)
		c.waitLog(t, "too many open files")
		closeAll(conns)
		metrics := c.waitServing(t)
		if strings.Contains(metrics, "kvselect_http_accept_retries_total 0\n") || !strings.Contains(metrics, "kvselect_http_accept_retries_total") {
			t.Fatalf("accept retries not counted: %s", grepLines(metrics, "kvselect_http_accept"))
		}
		c.stop(t)
	})
}

// fdChild is the child: lower RLIMIT_NOFILE, serve until stdin closes,
// report READY addr and EXIT code on stdout.
func fdChild(args []string) {
	lim := syscall.Rlimit{Cur: childNofile, Max: childNofile}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Printf("EXIT setrlimit: %v\n", err)
		os.Exit(0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan bound, 1)
	done := make(chan int, 1)
	args = append([]string{"--host", "127.0.0.1", "--port", "0", "--pprof=false"}, args...)
	go func() {
		done <- serve(ctx, args, envOf(map[string]string{"DYN_USE_KV_EVENTS": "false"}), os.Stderr, ready)
	}()
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case b := <-ready:
		addr := b.http
		fmt.Printf("READY %s\n", addr)
	case code := <-done:
		fmt.Printf("EXIT %d\n", code)
		os.Exit(0)
	}
	select {
	case <-stdinClosed:
		cancel()
		fmt.Printf("EXIT %d\n", <-done)
	case code := <-done:
		fmt.Printf("EXIT %d\n", code)
	}
	os.Exit(0)
}

// fdChildProc is the parent's handle on a child.
type fdChildProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	logs  chan string
	base  string
}

func startFDChild(t *testing.T, args ...string) *fdChildProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeSurvivesDescriptorExhaustion$")
	cmd.Env = append(os.Environ(), fdChildEnv+"=run "+strings.Join(args, " "))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &fdChildProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), logs: make(chan string, 1024)}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() { // drain the child's log so it never blocks on a full pipe
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case c.logs <- sc.Text():
			default:
			}
		}
		close(c.logs)
	}()
	line := c.line(t)
	addr, ok := strings.CutPrefix(line, "READY ")
	if !ok {
		t.Fatalf("child: %s", line)
	}
	c.base = "http://" + addr
	return c
}

func (c *fdChildProc) line(t *testing.T) string {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child stdout ended: %v", c.out.Err())
	}
	return c.out.Text()
}

// openIdle opens n connections that send nothing.
func (c *fdChildProc) openIdle(t *testing.T, n int) []*rawConn {
	t.Helper()
	conns := make([]*rawConn, 0, n)
	for range n {
		nc, err := net.DialTimeout("tcp", strings.TrimPrefix(c.base, "http://"), 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, not a timing assertion
		conns = append(conns, &rawConn{Conn: nc, r: bufio.NewReader(nc)})
	}
	t.Cleanup(func() { closeAll(conns) })
	return conns
}

// waitLog reads the child's log until a line contains s.
func (c *fdChildProc) waitLog(t *testing.T, s string) {
	t.Helper()
	guard := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-c.logs:
			if !ok {
				t.Fatalf("child log ended before %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-guard:
			t.Fatalf("no %q in the child's log", s)
		}
	}
}

// waitServing retries a new connection until the child serves it (the
// idle connections' closes reach it asynchronously) and returns /metrics.
func (c *fdChildProc) waitServing(t *testing.T) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		res, err := http.Get(c.base + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return string(b)
			}
		}
		if attempt == 1000 {
			t.Fatalf("the child no longer serves: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop closes the child's stdin (its shutdown signal) and expects exit 0.
func (c *fdChildProc) stop(t *testing.T) {
	t.Helper()
	http.DefaultClient.CloseIdleConnections()
	c.stdin.Close()
	if l := c.line(t); l != "EXIT 0" {
		t.Fatalf("child: %s", l)
	}
}

func closeAll(conns []*rawConn) {
	for _, c := range conns {
		c.Close()
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// rawConn is one client connection spoken to by hand (no pooling, no
// retries), so the test sees exactly what the server did with it.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// get sends GET path and reads the whole response.
func (c *rawConn) get(path string) (*http.Response, string, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: kvselect\r\n\r\n"); err != nil {
		return nil, "", err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b), err
}
