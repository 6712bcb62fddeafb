package plugin

import (
	"context"
	"testing"

	"github.com/kvhost/kvhost/sdk"
)

// BenchmarkLoadCold loads the mha plugin with no cache at all: limits and
// instrumentation, validation of the original, compile, handshake.
func BenchmarkLoadCold(b *testing.B) {
	wasm := readWasm(b, "mha")
	ctx := context.Background()
	for b.Loop() {
		rt, err := NewRuntime(ctx, Config{NoCache: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rt.Load(ctx, "mha", wasm); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
	}
}

// BenchmarkLoadCached loads through the file cache and its records with a
// new runtime each time: a process restart (no validation, no compile).
func BenchmarkLoadCached(b *testing.B) {
	wasm := readWasm(b, "mha")
	ctx := context.Background()
	dir := b.TempDir()
	warm, _ := NewRuntime(ctx, Config{CacheDir: dir})
	if _, err := warm.Load(ctx, "mha", wasm); err != nil {
		b.Fatal(err)
	}
	_ = warm.Close(ctx)
	for b.Loop() {
		rt, err := NewRuntime(ctx, Config{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rt.Load(ctx, "mha", wasm); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
	}
}

// BenchmarkInstantiate creates and closes one instance (Go runtime start-up
// in _initialize included).
func BenchmarkInstantiate(b *testing.B) {
	p := load(b, "mha")
	ctx := context.Background()
	for b.Loop() {
		inst, err := p.m.instantiate(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.m.discard(inst)
	}
}

// BenchmarkConfigureSize is one configure + size round trip on a pooled
// instance (Llama-3-8B, 64 buffers).
func BenchmarkConfigureSize(b *testing.B) {
	p := load(b, "mha")
	ctx := context.Background()
	in := sdk.ConfigureInput{Model: modelConfig(b, "llama-3-8b")}
	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Configure(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Size(ctx, 55923118899, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}
