package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// allocTestName picks out the allocation tests by name: every
// testing.AllocsPerRun test is named ...Alloc... (Allocs, AllocatesNothing,
// ZeroAlloc).
var allocTestName = regexp.MustCompile(`^Test\w*Alloc`)

// TestMakeTestRunsAllocationTests: `make test` runs everything under -race,
// where the allocation tests skip, so its recipe must also run them in a
// plain build. The test reads the Makefile's test recipe, takes the -run
// pattern of its go test line without -race, and checks that it selects
// every allocation test in the repository and that none of those tests can
// skip on -short (the step must not silently run nothing).
func TestMakeTestRunsAllocationTests(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)\s*:?=\s*(.*)$`).FindAllStringSubmatch(string(mk), -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	expand := func(s string) string {
		for { // until no variable is left: a variable may name another
			t := regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(s, func(v string) string {
				return vars[v[2:len(v)-1]]
			})
			if t == s {
				return s
			}
			s = t
		}
	}
	var pattern string
	inTest := false
	for _, line := range strings.Split(string(mk), "\n") {
		switch {
		case strings.HasPrefix(line, "test:"):
			inTest = true
			continue
		case inTest && !strings.HasPrefix(line, "\t"):
			inTest = false
		}
		if !inTest || !strings.Contains(line, " test ") || strings.Contains(line, "-race") || strings.Contains(line, "echo \"") {
			continue
		}
		if m := regexp.MustCompile(`-run '([^']*)'`).FindStringSubmatch(line); m != nil {
			if strings.Contains(line, "-short") {
				t.Errorf("the allocation step runs with -short: %s", line)
			}
			pattern = expand(m[1])
		}
	}
	if pattern == "" {
		t.Fatal("make test has no go test step without -race that selects tests with -run: the allocation tests never run")
	}
	run, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("-run %q: %v", pattern, err)
	}

	found := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !allocTestName.MatchString(fn.Name.Name) {
				continue
			}
			found++
			if !run.MatchString(fn.Name.Name) {
				t.Errorf("%s: %s is not selected by make test's -run %q", path, fn.Name.Name, pattern)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Short" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testing" {
						t.Errorf("%s: %s skips on -short", path, fn.Name.Name)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 11 {
		t.Fatalf("found %d allocation tests, want at least the 11 known ones", found)
	}
}
