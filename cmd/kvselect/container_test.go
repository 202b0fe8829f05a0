package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvselect/kvselect/httpapi"
)

// The container recipe cannot be built here (no Docker engine runs on the
// project machines), so these tests check what can be checked without
// one: the Dockerfile's build step is `make static`, that target yields a
// static binary, the image's health check is a command the binary has,
// and the Kubernetes example agrees with the image.

// dockerfile is one instruction per entry (continuations joined).
type dockerLine struct {
	instr, args string
}

func readDockerfile(t *testing.T) []dockerLine {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerLine
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		instr, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerLine{strings.ToUpper(instr), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// makeRecipe returns the recipe lines of a Makefile target.
func makeRecipe(t *testing.T, target string) []string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(mk), "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			out = append(out, strings.TrimSpace(line))
		case in:
			return out
		}
	}
	return out
}

// TestDockerfile: a multi-stage build whose build step is the Makefile's
// `static` target (so CI's static check covers the image's binary), a
// distroless non-root final stage that copies what that step wrote,
// exposes the API and replica ports, and checks its health with the
// binary's own `health` subcommand against the port it serves.
func TestDockerfile(t *testing.T) {
	lines := readDockerfile(t)
	var froms []string
	var buildRuns []string
	stage := 0
	var final []dockerLine
	for _, l := range lines {
		if l.instr == "FROM" {
			froms = append(froms, l.args)
			stage++
			continue
		}
		if stage == 1 && l.instr == "RUN" {
			buildRuns = append(buildRuns, l.args)
		}
		if stage == 2 {
			final = append(final, l)
		}
	}
	if len(froms) != 2 || !strings.HasSuffix(froms[0], " AS build") || !strings.HasPrefix(froms[0], "golang:") ||
		!strings.HasPrefix(froms[1], "gcr.io/distroless/static") {
		t.Fatalf("stages %q: want a golang build stage and a distroless static final stage", froms)
	}
	if strings.Contains(froms[0], ":latest") || strings.Contains(froms[1], ":latest") {
		t.Errorf("unpinned base image in %q", froms)
	}
	// The build step is the Makefile target.
	i := slices.IndexFunc(buildRuns, func(r string) bool { return strings.HasPrefix(r, "make static ") })
	if i < 0 || i != len(buildRuns)-1 {
		t.Fatalf("the build stage's last RUN is not `make static ...`: %q", buildRuns)
	}
	out := regexp.MustCompile(`STATIC_OUT=(\S+)`).FindStringSubmatch(buildRuns[i])
	if out == nil {
		t.Fatalf("make static without STATIC_OUT: %q", buildRuns[i])
	}
	recipe := strings.Join(makeRecipe(t, "static"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-o $(STATIC_OUT) ./cmd/kvselect", "-X main.version=$(VERSION)", "-trimpath"} {
		if !strings.Contains(recipe, want) {
			t.Errorf("make static's recipe lacks %q:\n%s", want, recipe)
		}
	}
	get := func(instr string) []string {
		var args []string
		for _, l := range final {
			if l.instr == instr {
				args = append(args, l.args)
			}
		}
		return args
	}
	if c := get("COPY"); len(c) != 1 || c[0] != "--from=build "+out[1]+" /kvselect" {
		t.Errorf("final COPY %q, want --from=build %s /kvselect", c, out[1])
	}
	if u := get("USER"); len(u) != 1 || strings.HasPrefix(u[0], "0") || strings.HasPrefix(u[0], "root") {
		t.Errorf("USER %q: the image must not run as root", u)
	}
	if e := get("EXPOSE"); len(e) != 1 || !slices.Equal(strings.Fields(e[0]), []string{"8092", "9092"}) {
		t.Errorf("EXPOSE %q, want 8092 9092", e)
	}
	if e := get("ENTRYPOINT"); len(e) != 1 || e[0] != `["/kvselect"]` {
		t.Errorf("ENTRYPOINT %q", e)
	}
	hc := get("HEALTHCHECK")
	cmd := regexp.MustCompile(`CMD (\[.*\])$`).FindStringSubmatch(strings.Join(hc, ""))
	if len(hc) != 1 || cmd == nil || !strings.Contains(cmd[1], `"/kvselect", "health", "--url", "http://127.0.0.1:8092"`) {
		t.Fatalf("HEALTHCHECK %q: want exec form running /kvselect health against port 8092", hc)
	}
	if c := get("CMD"); len(c) != 1 || !strings.Contains(c[0], `"serve"`) || !strings.Contains(c[0], `"8092"`) {
		t.Errorf("CMD %q", c)
	}
	// The health command's flags are the health subcommand's.
	var args []string
	for _, a := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(cmd[1], -1) {
		args = append(args, a[1])
	}
	if args[1] != "health" {
		t.Fatalf("health check args %q", args)
	}
	// (Exit 2 is a usage error; 0 or 1 depend on what listens on 8092 here.)
	if code := runHealth(t.Context(), append(args[2:], "--timeout", "50ms"), &strings.Builder{}, &strings.Builder{}); code == 2 {
		t.Fatalf("the health check's arguments %q do not parse", args[2:])
	}
}

// TestStaticBinary runs `make static` (the image's build step) into a
// temporary directory and checks the binary with debug/elf: no program
// interpreter (PT_INTERP) and no DT_NEEDED library, so it runs on a
// scratch or distroless image; its --version is the one make stamped, and
// its health subcommand checks a real server.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the static binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make is required")
		}
		t.Skip("SKIPPING: no make")
	}
	bin := filepath.Join(t.TempDir(), "kvselect")
	mk := exec.Command("make", "-s", "-C", "../..", "static", "STATIC_OUT="+bin, "VERSION=v0.0.0-static-test",
		"GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make static: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "kvselect v0.0.0-static-test (go") {
		t.Fatalf("--version: %q %v", out, err)
	}
	// The image's HEALTHCHECK, against the static binary serving.
	port := freePort(t)
	srv := exec.Command(bin, "serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--pprof=false")
	srv.Env = append(os.Environ(), "DYN_USE_KV_EVENTS=false")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(bin, "health", "--url", url, "--path", "/health").CombinedOutput()
		if err == nil && strings.HasPrefix(string(out), `200 {"status":"ok"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health of the static binary: %v %s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKubernetesExample: the example's workers file is a valid
// --workers-file, the container reads it where the ConfigMap is mounted,
// the probes are /ready and /health on the API port, and the ports and
// user are the image's.
func TestKubernetesExample(t *testing.T) {
	raw, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := string(raw)
	// The ConfigMap's workers.json: the block scalar's lines.
	var file strings.Builder
	in := false
	for _, line := range strings.Split(y, "\n") {
		switch {
		case strings.TrimSpace(line) == "workers.json: |":
			in = true
		case in && strings.HasPrefix(line, "    "):
			file.WriteString(line[4:] + "\n")
		case in:
			in = false
		}
	}
	specs, err := httpapi.DecodeWorkersFile([]byte(file.String()))
	if err != nil || len(specs) == 0 {
		t.Fatalf("the example's workers.json: %d workers, %v\n%s", len(specs), err, file.String())
	}
	mount := regexp.MustCompile(`mountPath: (\S+?),`).FindStringSubmatch(y)
	flag := regexp.MustCompile(`"--workers-file", "([^"]+)"`).FindStringSubmatch(y)
	if mount == nil || flag == nil || flag[1] != mount[1]+"/workers.json" {
		t.Fatalf("--workers-file %v is not workers.json under the ConfigMap's mount %v", flag, mount)
	}
	for _, want := range []string{
		"readinessProbe:\n            httpGet: {path: /ready, port: http}",
		"livenessProbe:\n            httpGet: {path: /health, port: http}",
		"{name: http, containerPort: 8092}", "{name: replica-sync, containerPort: 9092}",
		"runAsUser: 65532", "runAsNonRoot: true", "readOnlyRootFilesystem: true",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("kubernetes.yaml lacks %q", want)
		}
	}
	for _, l := range readDockerfile(t) {
		if l.instr == "USER" && !strings.HasPrefix(l.args, "65532") {
			t.Errorf("the image's USER %s is not the example's runAsUser 65532", l.args)
		}
	}
}
