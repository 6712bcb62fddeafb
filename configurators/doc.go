// Package configurators holds the built-in KV-pool configurator plugins:
// one wasip1 main package per kind (mha, mla, swa, mamba, fp4), each a thin
// shell that registers a layout.* implementation with sdk/guest, and the
// shared arithmetic in ./layout. scripts/build-plugins.sh builds each kind
// to host/plugin/builtin/wasm/<kind>.wasm, where the host embeds it.
package configurators
