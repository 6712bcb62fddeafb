# kvhost — see README.md. Every target works on a fresh machine with Go 1.26.
GO       ?= go
BIN      := bin/kvhost
DEMO     := models/demo-small-f32.gguf
ADDR     ?= 127.0.0.1:8080
RUNFLAGS ?=
BENCHOUT ?= bench/latest.txt
BENCHTIME ?= 1s

.PHONY: all build run test test-short bench check plugins clean

all: build

plugins:
	@if [ -x scripts/build-plugins.sh ]; then scripts/build-plugins.sh; fi

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

# gofmt, go vet and go.mod tidiness.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

clean:
	rm -rf bin
