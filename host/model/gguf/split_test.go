package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSplitName(t *testing.T) {
	if got := SplitName("/m/x-Q4_K_M", 0, 3); got != "/m/x-Q4_K_M-00001-of-00003.gguf" {
		t.Fatalf("SplitName = %q", got)
	}
	for in, want := range map[string]string{"/m/x-Q4_K_M-00002-of-00003.gguf": "x-Q4_K_M", "a/b.gguf": "b", "c-00001-of-00001.gguf": "c", "d-1-of-2.gguf": "d-1-of-2"} {
		if got := BaseName(in); got != want {
			t.Errorf("BaseName(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		path      string
		prefix    string
		no, count int
		ok        bool
	}{
		{"/m/x-Q4_K_M-00002-of-00003.gguf", "/m/x-Q4_K_M", 1, 3, true},
		{"a-00001-of-00001.gguf", "a", 0, 1, true},
		{"a-00004-of-00003.gguf", "", 0, 0, false}, // beyond the count
		{"a-00000-of-00003.gguf", "", 0, 0, false}, // shards count from 1
		{"a-0001-of-0003.gguf", "", 0, 0, false},   // not %05d
		{"a-00001-of-00003.bin", "", 0, 0, false},
		{"a.gguf", "", 0, 0, false},
	} {
		p, n, k, ok := ParseSplitName(c.path)
		if p != c.prefix || n != c.no || k != c.count || ok != c.ok {
			t.Errorf("ParseSplitName(%q) = %q %d %d %v, want %q %d %d %v", c.path, p, n, k, ok, c.prefix, c.no, c.count, c.ok)
		}
	}
}

func TestSplitTensorsGrouping(t *testing.T) {
	ts := []TensorSpec{{Name: "a", Data: make([]byte, 10)}, {Name: "b", Data: make([]byte, 40)}, {Name: "c", Data: make([]byte, 200)}, {Name: "d", Data: make([]byte, 1)}, {Name: "e", Data: make([]byte, 32)}}
	names := func(gs [][]TensorSpec) string {
		var parts []string
		for _, g := range gs {
			var s string
			for _, t := range g {
				s += t.Name
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "|")
	}
	for _, c := range []struct {
		lim  SplitLimits
		want string
	}{
		{SplitLimits{}, "abcde"},
		{SplitLimits{MaxTensors: 2}, "ab|cd|e"},
		{SplitLimits{MaxTensors: 1}, "a|b|c|d|e"},
		// Padded to 32: a=32, b=64, c=224 (alone: larger than the bound), d=32, e=32.
		{SplitLimits{MaxBytes: 96}, "ab|c|de"},
		{SplitLimits{MaxBytes: 96, MaxTensors: 1}, "a|b|c|d|e"},
	} {
		if got := names(SplitTensors(ts, 32, c.lim)); got != c.want {
			t.Errorf("%+v: %s, want %s", c.lim, got, c.want)
		}
	}
	if got := len(SplitTensors(nil, 0, SplitLimits{MaxTensors: 1})); got != 1 {
		t.Errorf("no tensors: %d shards, want 1 (a metadata-only file)", got)
	}
	if err := (SplitLimits{MaxTensors: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxTensors -1") {
		t.Errorf("Validate(-1) = %v", err)
	}
}

// writeSplitSample writes sampleTensors as shards of two tensors each (3
// shards over the 4 tensors … plus two more) and returns the paths.
func writeSplitSample(t *testing.T, dir string, align uint64) ([]KV, []TensorSpec, []string) {
	t.Helper()
	kvs := allTypesKVs()
	ts := append(sampleTensors(), TensorSpec{"tail", []uint64{7}, TypeF32, bytes.Repeat([]byte{1, 2, 3, 4}, 7)})
	paths, err := WriteSplit(filepath.Join(dir, "m"), kvs, ts, align, SplitLimits{MaxTensors: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 || filepath.Base(paths[2]) != "m-00003-of-00003.gguf" {
		t.Fatalf("paths %v", paths)
	}
	return kvs, ts, paths
}

func TestSplitRoundTrip(t *testing.T) {
	for _, align := range []uint64{0, 64} {
		dir := t.TempDir()
		kvs, ts, paths := writeSplitSample(t, dir, align)
		// Any shard opens the whole model.
		for _, p := range paths {
			f, err := OpenModel(p)
			if err != nil {
				t.Fatalf("align %d: OpenModel(%s): %v", align, p, err)
			}
			if len(f.Shards) != 3 || f.Path != paths[0] {
				t.Fatalf("%d shards, path %s", len(f.Shards), f.Path)
			}
			for _, kv := range kvs {
				v, ok := f.Get(kv.Key)
				if !ok || !reflect.DeepEqual(v, kv.Value) {
					t.Fatalf("key %s = %v, want %v", kv.Key, v, kv.Value)
				}
			}
			if v, _ := f.Get(SplitTensorsKey); v.Type != TypeInt32 || must(v.Uint()) != 5 {
				t.Fatalf("%s = %v", SplitTensorsKey, v)
			}
			if len(f.Tensors) != len(ts) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(ts))
			}
			for i, want := range ts {
				ti, data, err := f.Tensor(want.Name)
				if err != nil || !bytes.Equal(data, want.Data) || ti.Shard != i/2 || !reflect.DeepEqual(ti.Dims, want.Dims) {
					t.Fatalf("tensor %s: shard %d (want %d), err %v, bytes equal %v", want.Name, ti.Shard, i/2, err, bytes.Equal(data, want.Data))
				}
				if f.PathOf(ti) != paths[i/2] {
					t.Fatalf("PathOf(%s) = %s, want %s", want.Name, f.PathOf(ti), paths[i/2])
				}
				// TensorFile names the shard's own open file and offset.
				fd, off, ok := f.TensorFile(want.Name)
				if !ok || fd.Name() != paths[i/2] {
					t.Fatalf("TensorFile(%s) = %v %d %v", want.Name, fd, off, ok)
				}
				got := make([]byte, len(want.Data))
				if _, err := fd.ReadAt(got, off); err != nil || !bytes.Equal(got, want.Data) {
					t.Fatalf("TensorFile(%s) bytes differ (%v)", want.Name, err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.Tensor("tail"); !errors.Is(err, ErrClosed) {
				t.Fatalf("Tensor after Close: %v", err)
			}
			if _, _, ok := f.TensorFile("tail"); ok {
				t.Fatal("TensorFile after Close is ok")
			}
		}
		// Only the first shard holds the model's metadata.
		second, err := Open(paths[1])
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := second.Get("general.architecture"); ok {
			t.Fatal("shard 2 holds the model metadata")
		}
		second.Close()
	}
}

// TestSplitFileMatchesWrite: re-splitting a merged file and a split model
// gives the same shards byte for byte as WriteSplit of the same tensors.
func TestSplitFileMatchesWrite(t *testing.T) {
	dir := t.TempDir()
	kvs, ts, paths := writeSplitSample(t, dir, 0)
	merged := filepath.Join(dir, "merged.gguf")
	if err := os.WriteFile(merged, writeBytes(t, kvs, ts, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{merged, paths[1]} {
		out, err := SplitFile(src, filepath.Join(dir, "again"), SplitLimits{MaxTensors: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := range out {
			a, _ := os.ReadFile(paths[i])
			b, _ := os.ReadFile(out[i])
			if !bytes.Equal(a, b) {
				t.Fatalf("from %s: shard %d differs", src, i+1)
			}
		}
	}
}

func TestSplitErrors(t *testing.T) {
	type mutate func(t *testing.T, paths []string)
	rewrite := func(i int, kvs []KV, ts []TensorSpec) mutate {
		return func(t *testing.T, paths []string) {
			if err := writeFile(paths[i], kvs, ts, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	splitKVs := func(no, count, total int) []KV {
		return []KV{{SplitNoKey, NewUint16(uint16(no))}, {SplitCountKey, NewUint16(uint16(count))}, {SplitTensorsKey, NewInt32(int32(total))}}
	}
	tail := []TensorSpec{{"tail", []uint64{7}, TypeF32, make([]byte, 28)}}
	for _, c := range []struct {
		name string
		mut  mutate
		want string
	}{
		{"missing shard", func(t *testing.T, p []string) { os.Remove(p[1]) }, "shard 2 of 3 (" + "DIR/m-00002-of-00003.gguf): missing"},
		{"unreadable shard", func(t *testing.T, p []string) { os.WriteFile(p[2], []byte("GGUF"), 0o644) }, "shard 3 of 3 (DIR/m-00003-of-00003.gguf): gguf:"},
		{"count disagrees", rewrite(2, splitKVs(2, 4, 5), tail), "shard 3 of 3 (DIR/m-00003-of-00003.gguf): split.count is 4 but the file names count 3 shards"},
		{"no disagrees", rewrite(2, splitKVs(1, 3, 5), tail), "split.no is 1 but the file is named as shard 2"},
		{"not a shard", rewrite(2, nil, tail), "shard 3 of 3 (DIR/m-00003-of-00003.gguf): split.no or split.count is missing"},
		{"tensors count", rewrite(2, splitKVs(2, 3, 6), tail), "split.tensors.count is 6 but the 3 shards hold 5 tensors"},
		{"duplicate tensor", rewrite(2, splitKVs(2, 3, 5), []TensorSpec{{"f32", []uint64{1}, TypeF32, make([]byte, 4)}}), `tensor "f32" is also in shard 1 (DIR/m-00001-of-00003.gguf)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, paths := writeSplitSample(t, dir, 0)
			c.mut(t, paths)
			for _, p := range []string{paths[0], paths[2]} {
				if p == paths[2] && c.name == "unreadable shard" {
					continue // opening by the broken shard's own name is the same check
				}
				_, err := OpenModel(p)
				var se *SplitError
				want := strings.ReplaceAll(c.want, "DIR", dir)
				if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
					t.Fatalf("OpenModel(%s) = %v, want a SplitError containing %q", filepath.Base(p), err, want)
				}
			}
		})
	}
	t.Run("unnamed shard", func(t *testing.T) {
		dir := t.TempDir()
		_, _, paths := writeSplitSample(t, dir, 0)
		renamed := filepath.Join(dir, "model.gguf")
		if err := os.Rename(paths[1], renamed); err != nil {
			t.Fatal(err)
		}
		_, err := OpenModel(renamed)
		if err == nil || !strings.Contains(err.Error(), "one of 3 shards") || !strings.Contains(err.Error(), "-00002-of-00003.gguf suffix") {
			t.Fatalf("OpenModel(unnamed shard) = %v", err)
		}
	})
	t.Run("merged by llama-gguf-split", func(t *testing.T) {
		// --merge keeps split.no and split.tensors.count and sets
		// split.count to 0: a single file.
		p := filepath.Join(t.TempDir(), "merged.gguf")
		kvs := append(allTypesKVs(), KV{SplitNoKey, NewUint16(0)}, KV{SplitCountKey, NewUint16(0)}, KV{SplitTensorsKey, NewInt32(4)})
		if err := os.WriteFile(p, writeBytes(t, kvs, sampleTensors(), 0), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := OpenModel(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
	t.Run("one of one", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "plain-00001-of-00001.gguf")
		if err := os.WriteFile(p, writeBytes(t, allTypesKVs(), sampleTensors(), 0), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := OpenModel(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Shards != nil || len(f.Tensors) != 4 {
			t.Fatalf("a file named as one shard of one: %d shards, %d tensors", len(f.Shards), len(f.Tensors))
		}
		if _, _, ok := f.TensorFile("f32"); !ok {
			t.Fatal("OpenModel keeps a single file open for TensorFile")
		}
	})
}

func must(n uint64, ok bool) uint64 {
	if !ok {
		return 1<<64 - 1
	}
	return n
}

// TestSplitMetadataOnlyFirstShard: llama-gguf-split --no-tensor-first-split
// writes a first shard with the metadata and no tensors; it opens like any
// split.
func TestSplitMetadataOnlyFirstShard(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "m")
	ts := sampleTensors()
	split := func(no int) []KV {
		return []KV{{SplitNoKey, NewUint16(uint16(no))}, {SplitCountKey, NewUint16(3)}, {SplitTensorsKey, NewInt32(int32(len(ts)))}}
	}
	if err := writeFile(SplitName(prefix, 0, 3), append(allTypesKVs(), split(0)...), nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(SplitName(prefix, 1, 3), split(1), ts[:1], 0); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(SplitName(prefix, 2, 3), split(2), ts[1:], 0); err != nil {
		t.Fatal(err)
	}
	f, err := OpenModel(SplitName(prefix, 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, want := range ts {
		ti, data, err := f.Tensor(want.Name)
		if err != nil || !bytes.Equal(data, want.Data) || ti.Shard == 0 {
			t.Fatalf("tensor %s: shard %d, %v", want.Name, ti.Shard, err)
		}
	}
	if v, ok := f.Get("general.architecture"); !ok {
		t.Fatalf("metadata lost: %v", v)
	}
}
