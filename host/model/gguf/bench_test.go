package gguf

import (
	"github.com/kvhost/kvhost/internal/testmodels"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func BenchmarkParseStories260K(b *testing.B) {
	path := testmodels.MustStories260K(b)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("skipping: %s not available: %v", path, err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(path, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteStories260K(b *testing.B) {
	path := testmodels.MustStories260K(b)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("skipping: %s not available: %v", path, err)
	}
	f, err := Parse(path, data)
	if err != nil {
		b.Fatal(err)
	}
	specs := specsOf(b, f)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Write(io.Discard, f.KVs, specs, f.Alignment); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenModel opens stories260K as one file and as gguf-split shards
// of 8 tensors (openat, mmap and a header parse per shard).
func BenchmarkOpenModel(b *testing.B) {
	path := testmodels.MustStories260K(b)
	shards, err := SplitFile(path, filepath.Join(b.TempDir(), "s"), SplitLimits{MaxTensors: 8})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{{"merged", path}, {"split" + strconv.Itoa(len(shards)), shards[0]}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f, err := OpenModel(c.path)
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
