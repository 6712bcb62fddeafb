# syntax=docker/dockerfile:1
#
# kvhost's container image: one static binary (the CPU device; the built-in
# WebAssembly plugins are embedded in it) on a distroless base, running as a
# non-root user. Build and run:
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t kvhost .
#   docker run -p 8080:8080 kvhost                        # serves the bundled stories260K
#   docker run -p 8080:8080 -v hf-cache:/cache \
#     -e KVHOST_MODEL=hf://bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M kvhost
#
# Every serve flag is also a KVHOST_* variable (KVHOST_MAX_QUEUE=64) or a key
# of a config file (-v ./kvhost.yaml:/etc/kvhost/kvhost.yaml -e
# KVHOST_CONFIG=/etc/kvhost/kvhost.yaml). host/cmd/kvhost's docker_test.go
# lints this file and builds the same binary with `make static`.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
# The C sampling policies compile to WebAssembly with clang and wasi-libc
# (scripts/install-wasm-toolchain.sh installs the same packages).
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang lld wasi-libc libclang-rt-14-dev-wasm32 make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# make plugins builds the embedded plugins; make static the cgo-free binary.
RUN make plugins static VERSION="${VERSION}" STATIC_OUT=/out/kvhost \
 && mkdir -p /out/models /out/cache \
 && cp models/stories260K.gguf models/README.md /out/models/

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="kvhost" \
      org.opencontainers.image.description="An LLM inference host that knows where every byte of device memory went" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/kvhost /usr/local/bin/kvhost
COPY --from=build --chown=65532:65532 /out/models /models
COPY --from=build --chown=65532:65532 /out/cache /cache
COPY LICENSE NOTICE /usr/share/doc/kvhost/
# Models you mount go in /models; hub downloads (serve --model hf://...,
# kvhost pull) land in the Hugging Face cache under /cache, shared with any
# Python tool pointed at the same volume.
ENV HF_HOME=/cache/huggingface \
    KVHOST_ADDR=0.0.0.0:8080 \
    KVHOST_MODEL=/models/stories260K.gguf
VOLUME ["/models", "/cache"]
EXPOSE 8080
USER 65532:65532
# /health answers 503 while the model downloads or loads: give it time.
HEALTHCHECK --interval=30s --timeout=5s --start-period=5m --retries=3 \
  CMD ["/usr/local/bin/kvhost", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/kvhost"]
CMD ["serve"]
