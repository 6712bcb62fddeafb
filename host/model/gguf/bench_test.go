package gguf

import (
	"github.com/kvhost/kvhost/internal/testmodels"
	"io"
	"os"
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
