# kvhost — see README.md. Every target works on a fresh machine with Go 1.26.
GO       ?= go
BIN      := bin/kvhost
DEMO     := models/demo-small-f32.gguf
ADDR     ?= 127.0.0.1:8080
RUNFLAGS ?=
BENCHOUT ?= bench/latest.txt
BENCHTIME ?= 1s

CUDA_BIN := bin/kvhost-cuda
OUT      ?= gpu-report

FUZZTIME ?= 10s

SOAK_SECONDS ?= 300

.PHONY: all build run test test-short bench check plugins clean fuzz web soak kernels build-cuda check-cuda gpu-check

all: build

# The built-in plugins the binary embeds: Go configurators (wasip1) and C
# sampling policies (clang + wasi-libc: scripts/install-wasm-toolchain.sh).
plugins:
	@scripts/build-plugins.sh
	@scripts/build-samplers.sh

build: plugins
	$(GO) build -o $(BIN) ./host/cmd/kvhost

$(DEMO): | build
	$(BIN) gen-model --arch llama --size small --dtype f32 --out $(DEMO)

# Start the server on the CPU device with the built-in demo model.
run: build $(DEMO)
	$(BIN) serve --model $(DEMO) --addr $(ADDR) $(RUNFLAGS)

# The whole suite, with the race detector.
test: plugins
	$(GO) test -race -count=1 -timeout 30m ./...

test-short: plugins
	$(GO) test -short -count=1 ./...

# Benchmarks: figures land in $(BENCHOUT) (compare runs with benchstat).
bench: plugins
	@mkdir -p $(dir $(BENCHOUT))
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./... | tee $(BENCHOUT)

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
	rm -rf bin
