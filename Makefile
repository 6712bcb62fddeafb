# kvhost — see README.md. Every target works on a fresh machine with Go 1.26.
GO       ?= go
BIN      := bin/kvhost
DEMO     := models/demo-small-f32.gguf
MODEL    ?= models/stories260K.gguf
ADDR     ?= 127.0.0.1:8080
RUNFLAGS ?=
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
STATIC_OUT ?= bin/kvhost-static
DIST     ?= dist
RELEASE_ARCHS ?= amd64 arm64
BENCHOUT ?= bench/latest.txt
BENCHTIME ?= 1s

CUDA_BIN := bin/kvhost-cuda
OUT      ?= gpu-report

FUZZTIME ?= 10s

SOAK_SECONDS ?= 300

.PHONY: all build run run-demo test test-deploy test-short bench bench-compare bench-prefix check plugins clean fuzz web soak kernels build-cuda check-cuda gpu-check static release shared-note

all: build

# The built-in plugins the binary embeds: Go configurators (wasip1) and C
# sampling policies (clang + wasi-libc: scripts/install-wasm-toolchain.sh).
plugins:
	@scripts/build-plugins.sh
	@scripts/build-samplers.sh

build: plugins
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./host/cmd/kvhost

$(DEMO): | build
	$(BIN) gen-model --arch llama --size small --dtype f32 --out $(DEMO)

# Serve the trained stories260K shipped in models/ (or MODEL=path or
# MODEL=hf://ORG/NAME:QUANT) on the CPU device.
run: build
	$(BIN) serve --model $(MODEL) --addr $(ADDR) $(RUNFLAGS)

# Serve the generated demo model (random weights, Llama-sized layers): for
# size and speed work, not for text.
run-demo: build $(DEMO)
	$(BIN) serve --model $(DEMO) --addr $(ADDR) $(RUNFLAGS)

# The cgo-free static binary the container image copies (plugins must be
# built first: the Dockerfile runs `make plugins static`).
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(STATIC_OUT) ./host/cmd/kvhost

# Versioned static binaries for linux/amd64 and linux/arm64 in $(DIST), with
# SHA256SUMS; `kvhost version` prints $(VERSION).
release: plugins
	@mkdir -p $(DIST)
	@for arch in $(RELEASE_ARCHS); do \
	  out=$(DIST)/kvhost-$(VERSION)-linux-$$arch; \
	  echo "building $$out"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$out ./host/cmd/kvhost || exit 1; \
	done
	cd $(DIST) && sha256sum kvhost-$(VERSION)-linux-* > SHA256SUMS && cat SHA256SUMS

# Tests that need ../shared (the llama2.c checkpoint, llama.cpp's tools)
# skip without it; say so where everyone sees it, not only under -v.
shared-note:
	@[ -d ../shared/models ] || echo "note: ../shared is absent: the tests that compare against its llama2.c checkpoint and llama.cpp tools skip (go test -v shows which); stories260K itself is in models/"

# The whole suite, with the race detector, then the chart's tests.
test: plugins shared-note
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) build -o $(BIN) ./host/cmd/kvhost
	$(DEPLOY_TEST)

# The Helm chart's tests (deploy/test, a module of its own so that Helm and
# the Kubernetes APIs stay out of the main go.mod): render, lint, strict
# typed decoding, and bin/kvhost run as the rendered pod.
DEPLOY_TEST = cd deploy/test && KVHOST_BIN=$(abspath $(BIN)) $(GO) test -count=1 -timeout 20m ./...
test-deploy: plugins
	$(GO) build -o $(BIN) ./host/cmd/kvhost
	$(DEPLOY_TEST)

# The suite without the slow end-to-end, soak and browser tests
# (testing.Short()).
test-short: plugins shared-note
	$(GO) test -short -count=1 ./...

# Benchmarks: figures land in $(BENCHOUT) (compare runs with benchstat).
bench: plugins
	@mkdir -p $(dir $(BENCHOUT))
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./... | tee $(BENCHOUT)

# kvhost against llama.cpp (../shared/tools/llama.cpp) on the same generated
# models, alternating rounds, printing kvhost/llama.cpp per row; says so and
# succeeds when the tools are absent. A benchmark, never part of CI. Flags:
# COMPAREFLAGS='-rounds 5 -only "decode b=1" -avx2' (go run ./bench/compare -h).
COMPAREFLAGS ?=
bench-compare: plugins
	$(GO) run ./bench/compare $(COMPAREFLAGS)

# Issue 18's prefix-cache benchmark: a concurrent multi-turn chat replay
# on gen-model medium, the cache off and on in alternating rounds, printing
# prompt tokens computed, TTFT p50/p95 and total time (medians, ranges,
# on/off). A benchmark, never part of CI; ~10 minutes on 2 vCPUs. Flags:
# PREFIXFLAGS='-rounds 5 -size small' (go run ./bench/prefix -h).
PREFIXFLAGS ?=
bench-prefix:
	$(GO) run ./bench/prefix $(PREFIXFLAGS)

# Issue 7's soak: 64 clients for SOAK_SECONDS (default 5 minutes) with
# disconnects, cancellations, sampler swaps and hostile uploads.
soak: plugins
	KVHOST_SOAK_SECONDS=$(SOAK_SECONDS) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 30m ./host/cmd/kvhost

# Every native fuzz target for $(FUZZTIME) each (CI runs a short budget).
fuzz: plugins
	scripts/fuzz.sh $(FUZZTIME)

# Refresh the dashboard's vendored Chart.js from web/package-lock.json (needs
# npm); the copied file is committed, so build and run never need npm.
web:
	cd web && npm ci --no-audit --no-fund && npm run vendor

# gofmt, go vet and go.mod tidiness.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	cd deploy/test && $(GO) vet ./... && $(GO) mod tidy -diff

# --- CUDA (build tag cuda; needs the CUDA 11.8 toolkit: scripts/install-cuda.sh) ---

# Regenerate kernels/cuda/*.ptx and *.fatbin from the .cu sources (nvcc).
kernels:
	scripts/build-kernels.sh

# The CUDA binary, built here and carried to a GPU machine (which has no Go).
build-cuda: plugins
	CGO_ENABLED=1 $(GO) build -tags cuda -o $(CUDA_BIN) ./host/cmd/kvhost

# Compile and vet everything behind the cuda tag, compile its tests without
# running them (gorgonia.org/cu exits at init without a GPU), and fail when
# the committed PTX has drifted from the sources.
check-cuda:
	CGO_ENABLED=1 $(GO) vet -tags cuda ./host/device/... ./host/gpucheck/... ./host/cmd/kvhost/... ./kernels/cuda/...
	CGO_ENABLED=1 $(GO) test -tags cuda -c -o /dev/null ./host/device/cuda/
	scripts/build-kernels.sh --check

# On the GPU machine: run the prepared check and write its report to $(OUT).
gpu-check:
	scripts/gpu-check.sh $(OUT)

clean:
	rm -rf bin $(DIST)
