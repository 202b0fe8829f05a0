package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kvselect/kvselect"

// allowedInRepo is the import-direction rule (the domain below the edges,
// no package above cmd): which in-repo packages each package's non-test
// files may import. Keys are package
// paths relative to the repository; a package is governed by the longest
// key that is its path or a parent of it (tableKey), and so is an
// imported package. cmd/kvselect may import everything.
var allowedInRepo = map[string][]string{
	"radix": {},
	"sched": {"radix"},
	"core":  {"radix", "sched"},
	// core/text (tokenizers) is pure computation: no repository package.
	"core/text":    {},
	"zmqin":        {"core", "radix", "zmqin/zmtp", "zmqin/internal/msgpack", "zmqin/internal/ratelog", "zmqin/internal/budget"},
	"zmqin/zmtp":   {"core", "zmqin/internal/budget", "zmqin/internal/mpsc"}, // core: the one endpoint parser (core.ParseZMQEndpoint)
	"zmqin/mesh":   {"core", "zmqin/zmtp", "zmqin/internal/msgpack", "zmqin/internal/ratelog", "zmqin/internal/budget", "zmqin/internal/mpsc"},
	"zmqin/zmqpub": {"zmqin", "zmqin/zmtp", "core", "radix"},
	"httpapi":      {"core", "core/text", "perf", "httpapi/internal/jsonscan"},
	// The client is for callers: the standard library only.
	"httpapi/client": {},
	// httpapi's JSON scanner, internal to it: the standard library only.
	"httpapi/internal/jsonscan": {},
	// httpapi/epp is the gateway's endpoint picker (Envoy ext_proc over
	// gRPC), a sibling of httpapi: core, the tokenizers, never httpapi.
	"httpapi/epp": {"core", "core/text"},
	// httpapi/engines scrapes engines' metrics; it knows no domain type.
	"httpapi/engines": {},
	// httpapi/kube turns pods and InferencePools into catalog snapshots
	// for core's reconciler, and exports its stats on a perf registry.
	"httpapi/kube": {"core", "perf"},
	"perf":         {},
	// perf/promcheck reads expositions for tests only (expfmt).
	"perf/promcheck": {},
	"bench":          {"radix", "zmqin", "zmqin/zmtp", "zmqin/zmqpub", "bench/extproc"},
	// bench/extproc plays Envoy's side of ext_proc for the epp mix, with
	// its no-op processor: gRPC and Envoy's types, no repository package,
	// so that bench's own files stay free of them.
	"bench/extproc":  {},
	"bench/sim":      {"bench", "bench/sim/vllm"},
	"bench/sim/vllm": {},
	// bench/plot draws numbers it is handed: no harness, no domain.
	"bench/plot": {},
	// Internal packages of zmqin: the msgpack primitives of the KV batches
	// and the mesh envelopes, the rate-limited logger of a listener or a
	// peer, the queue budgets, and the helpers of the zmqin packages'
	// tests (only test files import it).
	"zmqin/internal/msgpack": {},
	"zmqin/internal/ratelog": {},
	"zmqin/internal/budget":  {},
	"zmqin/internal/mpsc":    {},
	"zmqin/internal/zmqtest": {},
	// The NATS event plane: Dynamo's envelope and RouterEvent codec, the
	// KV ingress and booking exchange over NATS, the embedded server; the
	// ActiveSequenceEvent codec is the mesh's.
	"zmqin/natsplane": {"core", "radix", "zmqin/mesh", "zmqin/internal/msgpack", "zmqin/internal/ratelog", "zmqin/internal/budget", "zmqin/internal/mpsc"},
}

// tableKey returns the key of allowedInRepo that governs package path pkg:
// the longest key that is pkg or one of its parent directories.
func tableKey(pkg string) (string, bool) {
	for k := pkg; ; {
		if _, ok := allowedInRepo[k]; ok {
			return k, true
		}
		i := strings.LastIndexByte(k, '/')
		if i < 0 {
			return "", false
		}
		k = k[:i]
	}
}

// externalOnly names third-party import prefixes that only some packages
// may use. An owner is a key of allowedInRepo (a nested package is
// governed by its own key: bench/sim is not bench) or cmd/kvselect.
var externalOnly = []struct {
	prefix string
	owners []string
}{
	{"github.com/go-zeromq/", []string{"zmqin/zmtp"}},
	{"github.com/pebbe/zmq4", []string{"zmqin/zmtp"}},
	// NATS (client and embedded server) only in the event plane, and in
	// cmd/kvselect for the bench's readiness barrier over the replicas' bus.
	{"github.com/nats-io/", []string{"zmqin/natsplane", "cmd/kvselect"}},
	{"github.com/valyala/fasthttp", []string{"httpapi", "perf", "bench"}},
	// gRPC and Envoy's API types only in the endpoint picker and its host.
	// bench/extproc: the load harness's ext_proc client and no-op server.
	{"google.golang.org/grpc", []string{"httpapi/epp", "bench/extproc", "cmd/kvselect"}},
	{"github.com/envoyproxy/go-control-plane", []string{"httpapi/epp", "bench/extproc", "cmd/kvselect"}},
	{"flag", []string{"cmd/kvselect"}},
	// The Prometheus parser is a test tool: it stays out of the binary.
	{"github.com/prometheus/", []string{"perf/promcheck"}},
	// The JSON-schema validator checks the OpenAPI document in tests only.
	{"github.com/santhosh-tekuri/jsonschema", []string{}},
	{"gopkg.in/yaml.v3", []string{"cmd/kvselect"}},
	// client-go and apimachinery only in Kubernetes discovery (core stays
	// free of them) and the program that wires it.
	{"k8s.io/", []string{"httpapi/kube", "cmd/kvselect"}},
}

// testOnly are the in-repo packages only test files may import, with
// what is nested in them: test tools and helpers, which stay out of every
// binary (cmd/kvselect's non-test files included).
var testOnly = []string{"perf/promcheck", "zmqin/internal/zmqtest"}

// TestImportDirection enforces the import rules above on every Go file of
// the repository, so a wrong arrow fails CI: non-test files by the tables
// (checkFile), test files by the looser rule of tests (checkTestFile).
func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked, tests := 0, 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if strings.HasSuffix(path, "_test.go") {
			checkTestFile(t, path)
			tests++
			return nil
		}
		checkFile(t, path, pkg)
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 || tests == 0 {
		t.Fatalf("%d Go files and %d test files found: the walk is broken", checked, tests)
	}
}

// inRepo returns import path p relative to the repository, and whether p
// is a package of the repository.
func inRepo(p string) (string, bool) { return strings.CutPrefix(p, module+"/") }

// under reports whether package path pkg is one of dirs or nested in one.
func under(pkg string, dirs ...string) bool {
	for _, d := range dirs {
		if pkg == d || strings.HasPrefix(pkg, d+"/") {
			return true
		}
	}
	return false
}

// checkTestFile holds a test file to the rule of tests, looser than the
// tables: a test may import any package of the repository, since it
// drives its package from outside as well as from inside (zmqin's
// external tests publish with zmqin/zmqpub, which imports zmqin; bench's
// build core services; httpapi/client's run the server it calls), and the
// test-only helpers (testOnly); never a package under cmd/, which are
// programs, not libraries. The third-party, environment and edge-name
// rules are the binary's and do not apply: a test may read CI, define a
// test flag, validate a schema or assert a status.
func checkTestFile(t reporter, path string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if dep, ok := inRepo(p); ok && under(dep, "cmd") {
			t.Errorf("%s: a test may not import %s: the packages under cmd/ are programs", path, dep)
		}
	}
}

// reporter is the part of testing.T the checker uses, so a test can count
// the violations it reports.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatal(args ...any)
}

// recorder counts Errorf calls instead of failing the test.
type recorder struct {
	*testing.T
	n    int
	msgs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.n++
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func checkFile(t reporter, path, pkg string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	top := strings.SplitN(pkg, "/", 2)[0]
	owner := pkg
	if k, ok := tableKey(pkg); ok {
		owner = k
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if dep, ok := inRepo(p); ok && under(dep, testOnly...) {
			t.Errorf("%s: only test files may import %s (testOnly)", path, dep)
		}
		if pkg != "cmd/kvselect" {
			if dep, ok := strings.CutPrefix(p, module+"/"); ok {
				key, known := tableKey(pkg)
				depKey, depKnown := tableKey(dep)
				if !depKnown {
					depKey = dep
				}
				if !known {
					t.Errorf("%s: package %q is not in the allowedInRepo table", path, pkg)
				} else if depKey != key && !slices.Contains(allowedInRepo[key], depKey) {
					t.Errorf("%s: %s may not import %s (allowedInRepo)", path, key, dep)
				}
			}
		}
		for _, rule := range externalOnly {
			if p == rule.prefix || strings.HasPrefix(p, rule.prefix) {
				if !slices.Contains(rule.owners, owner) {
					t.Errorf("%s: only %v may import %s", path, rule.owners, p)
				}
			}
		}
	}
	if pkg != "cmd/kvselect" {
		checkNoEnv(t, path)
	}
	if slices.Contains(domainPackages, top) {
		checkNoEdgeNames(t, path)
	}
}

// domainPackages are the packages below httpapi: they return classed
// errors and take configs, and name no HTTP status or environment
// variable (httpapi owns the status table, cmd the environment).
var domainPackages = []string{"radix", "sched", "core"}

// edgeNames are the words a domain package must not contain, in code or
// comments: an HTTP status number, a status code, a DYN_* variable name. A
// number followed by a unit or a count ("500 K entries", "404 ms") is a
// quantity, not a status.
var (
	edgeNames = regexp.MustCompile(`\b(400|401|403|404|405|409|413|415|422|429|500|502|503|504)\b|[Ss]tatus code|\bDYN_[A-Z0-9_]+|http\.Status`)
	quantity  = regexp.MustCompile(`^\s?(K|M|G|Ki|Mi|ms|µs|us|ns|s|bytes?|B|blocks?|entries|workers?|ranks?|tokens?)\b`)
)

// checkNoEdgeNames reports every line of path naming an edge concept.
func checkNoEdgeNames(t reporter, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		for _, m := range edgeNames.FindAllStringIndex(line, -1) {
			if quantity.MatchString(line[m[1]:]) {
				continue
			}
			t.Errorf("%s:%d: %q: a package below httpapi names an HTTP status or an environment variable", path, i+1, line[m[0]:m[1]])
			break
		}
	}
}

// checkNoEnv rejects os.Getenv, os.LookupEnv and os.Environ outside cmd.
func checkNoEnv(t reporter, path string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" {
			switch sel.Sel.Name {
			case "Getenv", "LookupEnv", "Environ":
				t.Errorf("%s: only cmd/kvselect reads the environment (os.%s)", path, sel.Sel.Name)
			}
		}
		return true
	})
}

// TestImportRulesNestedPackages: a nested package is governed by its own
// entry, not its parent's: zmqin may not import zmqin/zmqpub (the
// publisher stays out of the ingress), zmqin/zmqpub may import zmqin, and
// neither may import httpapi; the transport, zmqin/zmtp, imports neither
// the ingress nor the index, and is the one importer of a ZMQ library;
// the mesh, zmqin/mesh, and the ingress import the transport, never each
// other; bench/sim reaches the selector and the
// engines only through bench (no fasthttp, no ZMQ, no index of its own),
// and bench may not import the simulator.
func TestImportRulesNestedPackages(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		pkg, imp string
		bad      bool
	}{
		{"zmqin", "zmqin/zmqpub", true},
		{"zmqin/zmqpub", "zmqin", false},
		{"zmqin/zmqpub", "radix", false},
		{"zmqin/zmqpub", "httpapi", true},
		{"zmqin", "httpapi", true},
		{"bench", "zmqin/zmqpub", false},
		{"core", "zmqin/zmqpub", true},
		{"bench/sim", "bench", false},
		{"bench/sim", "radix", true},
		{"bench/sim", "zmqin", true},
		{"bench/sim", "core", true},
		{"bench/sim", "github.com/valyala/fasthttp", true},
		{"bench/sim", "github.com/go-zeromq/zmq4", true},
		{"bench", "github.com/valyala/fasthttp", false},
		{"bench", "bench/sim", true},
		{"bench", "bench/extproc", false},
		{"bench", "google.golang.org/grpc", true},
		{"bench/extproc", "google.golang.org/grpc", false},
		{"bench/extproc", "bench", true},
		{"zmqin/zmqpub", "github.com/go-zeromq/zmq4", true},
		{"zmqin", "github.com/go-zeromq/zmq4", true},
		{"zmqin/zmtp", "github.com/go-zeromq/zmq4", false},
		{"zmqin", "zmqin/zmtp", false},
		{"zmqin/zmqpub", "zmqin/zmtp", false},
		{"zmqin/zmtp", "zmqin", true},
		{"zmqin/zmtp", "radix", true},
		{"zmqin/zmtp", "zmqin/zmqpub", true},
		{"zmqin/mesh", "zmqin/zmtp", false},
		{"zmqin/mesh", "core", false},
		{"zmqin/mesh", "zmqin", true},
		{"zmqin/mesh", "radix", true},
		{"zmqin", "zmqin/mesh", true},
		{"zmqin/zmtp", "zmqin/mesh", true},
		{"zmqin/mesh", "github.com/go-zeromq/zmq4", true},
		{"httpapi/epp", "core", false},
		{"httpapi/epp", "core/text", false},
		{"httpapi/epp", "httpapi", true},
		{"httpapi/epp", "zmqin", true},
		{"httpapi/epp", "google.golang.org/grpc", false},
		{"httpapi/epp", "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3", false},
		{"httpapi", "google.golang.org/grpc", true},
		{"core", "github.com/envoyproxy/go-control-plane/envoy/config/core/v3", true},
		{"core", "httpapi/epp", true},
	} {
		path := filepath.Join(dir, "f.go")
		imp := tc.imp
		if !strings.Contains(imp, ".") {
			imp = module + "/" + imp
		}
		src := fmt.Sprintf("package x\nimport _ %q\n", imp)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{T: t}
		checkFile(rec, path, tc.pkg)
		if (rec.n > 0) != tc.bad {
			t.Errorf("%s importing %s: %d violations %v, want bad=%v", tc.pkg, tc.imp, rec.n, rec.msgs, tc.bad)
		}
	}
}

// TestImportRulesTestFiles: a test file may import what its package's
// non-test files may not (zmqin's tests import zmqin/zmqpub, the zmqin
// packages' tests their helpers, bench's core), but nothing under cmd/; a
// non-test file, even cmd/kvselect's, may not import a test helper.
func TestImportRulesTestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		pkg, imp string
		test     bool
		bad      bool
	}{
		{"zmqin", "zmqin/zmqpub", true, false},
		{"zmqin/zmtp", "zmqin/internal/zmqtest", true, false},
		{"zmqin/mesh", "zmqin/internal/zmqtest", true, false},
		{"bench", "core", true, false},
		{"httpapi", "perf/promcheck", true, false},
		{"zmqin", "cmd/kvselect", true, true},
		{"bench", "cmd/kvselect", true, true},
		{"zmqin/mesh", "zmqin/internal/zmqtest", false, true},
		{"cmd/kvselect", "zmqin/internal/zmqtest", false, true},
		{"cmd/kvselect", "perf/promcheck", false, true},
		{"cmd/kvselect", "zmqin/zmqpub", false, false},
	} {
		name := "f.go"
		if tc.test {
			name = "f_test.go"
		}
		path := filepath.Join(dir, name)
		src := fmt.Sprintf("package x\nimport _ %q\n", module+"/"+tc.imp)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{T: t}
		if tc.test {
			checkTestFile(rec, path)
		} else {
			checkFile(rec, path, tc.pkg)
		}
		if (rec.n > 0) != tc.bad {
			t.Errorf("%s (test file %v) importing %s: %d violations %v, want bad=%v", tc.pkg, tc.test, tc.imp, rec.n, rec.msgs, tc.bad)
		}
	}
}

// TestImportRulesCatchViolations proves the checker can fail: a synthetic file
// that breaks each rule must be reported.
func TestImportRulesCatchViolations(t *testing.T) {
	dir := t.TempDir()
	src := `package radix
import (
	"flag"
	"os"
	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
)
var _ = flag.Parse
var _ = os.Getenv("X")
var _ = core.X
var _ = fasthttp.X
// A conflict is a 409.
// DYN_ROUTER_TEMPERATURE sets it.
`
	path := filepath.Join(dir, "bad.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{T: t}
	checkFile(rec, path, "radix")
	if rec.n != 6 {
		t.Fatalf("want 6 violations (in-repo, fasthttp, flag, Getenv, a status, an env name), got %d: %v", rec.n, rec.msgs)
	}
}
