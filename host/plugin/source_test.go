package plugin

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/kvhost/kvhost/sdk"
)

// byteCountingFS counts every byte read from its .wasm files, whichever
// way they are read (fs.ReadFile, or Open and a stream, as hashing does).
type byteCountingFS struct {
	fstest.MapFS
	read *atomic.Int64
}

func (c byteCountingFS) Open(name string) (fs.File, error) {
	f, err := c.MapFS.Open(name)
	if err != nil || !strings.HasSuffix(name, ".wasm") {
		return f, err
	}
	return countingFile{File: f, read: c.read}, nil
}

type countingFile struct {
	fs.File
	read *atomic.Int64
}

func (f countingFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.read.Add(int64(n))
	return n, err
}

// sumsFS is the configurators as a built-in set, with a SumsFile listing
// their sha256 (wrong: listed sums that are not the bytes').
func sumsFS(t *testing.T, read *atomic.Int64, wrong ...string) byteCountingFS {
	fsys := byteCountingFS{MapFS: fstest.MapFS{}, read: read}
	var list strings.Builder
	for _, k := range configuratorNames {
		b := readWasm(t, k)
		fsys.MapFS[k+".wasm"] = &fstest.MapFile{Data: b}
		sum := sum256(b)
		for _, w := range wrong {
			if w == k {
				sum = sum256(append(b, 0))
			}
		}
		fmt.Fprintf(&list, "%s  %s.wasm\n", sum, k)
	}
	fsys.MapFS[SumsFile] = &fstest.MapFile{Data: []byte(list.String())}
	return fsys
}

// TestWarmStartWithSumsReadsNoBuiltinBytes: with a SumsFile a warm start
// (records and answers on disk) tells recorded kinds, claims the configurator,
// configures it and trusts the built-ins under an allow-list without
// reading one byte of any module — not even to hash it, which paged in the
// whole embedded set at every start; the first start reads them (the
// counter counts).
func TestWarmStartWithSumsReadsNoBuiltinBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var read atomic.Int64
	fsys := sumsFS(t, &read)
	_, raw, err := sampleFor(sdk.Descriptor{Name: "mha", Architectures: []string{"LlamaForCausalLM"}})
	if err != nil {
		t.Fatal(err)
	}
	in := sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: "bf16"}}
	for run := range 2 {
		rt, err := NewRuntime(ctx, Config{CacheDir: dir, RecallAnswers: true, InterpretConfigurators: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRegistryWith(rt, fsys, "", RegistryOptions{AllowSHA256: []string{strings.Repeat("ab", 32)}})
		if err != nil {
			t.Fatal(err)
		}
		read.Store(0)
		// The walk to mha described fp4, mamba and mha on the first start
		// (name order), so their kinds are recorded; mla's and swa's would
		// be read from their export sections' first bytes.
		for _, name := range []string{"fp4", "mamba", "mha"} {
			if k, err := r.Kind(name); err != nil || k != KindConfigurator {
				t.Fatalf("run %d: kind of %s: %q %v", run, name, k, err)
			}
		}
		p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if _, err := p.Configure(ctx, in); err != nil {
			t.Fatal(err)
		}
		if !r.Trusted(readWasm(t, "mha")) {
			t.Fatalf("run %d: the built-in mha is not trusted", run)
		}
		if sum, _ := r.SHA256("mha"); sum != sum256(readWasm(t, "mha")) {
			t.Fatalf("run %d: SHA256(mha) %s is not its bytes' sum", run, sum)
		}
		if got := read.Load(); run == 1 && got != 0 {
			t.Fatalf("warm start read %d bytes of the built-ins", got)
		} else if run == 0 && got == 0 {
			t.Fatal("first start read no bytes: the counter does not count")
		}
		_ = r.Close(ctx)
		_ = rt.Close(ctx)
	}
}

// TestStaleSumsRefused: a built-in whose bytes are not what the SumsFile
// lists (a module rebuilt without scripts/sum-builtins.sh) is refused when
// its bytes are read, with the remedy, never described or loaded under the
// listed sum; the others still serve. A malformed SumsFile is an error.
func TestStaleSumsRefused(t *testing.T) {
	ctx := context.Background()
	var read atomic.Int64
	rt, err := NewRuntime(ctx, Config{CacheDir: t.TempDir(), RecallAnswers: true, InterpretConfigurators: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	r, err := NewRegistryWith(rt, sumsFS(t, &read, "mha"), "", RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	_, err = r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
	if err == nil || !strings.Contains(err.Error(), "mha.wasm has sha256") || !strings.Contains(err.Error(), "make plugins") {
		t.Fatalf("stale mha: %v", err)
	}
	if _, err := r.ForArchitecture(ctx, "DeepseekV2ForCausalLM", "bf16"); err != nil {
		t.Fatalf("mla beside a stale mha: %v", err)
	}
	for _, bad := range []string{"xyz  mha.wasm\n", strings.Repeat("zz", 32) + "  mha.wasm\n", strings.Repeat("ab", 32) + "mha.wasm\n"} {
		fsys := fstest.MapFS{"mha.wasm": &fstest.MapFile{Data: readWasm(t, "mha")}, SumsFile: &fstest.MapFile{Data: []byte(bad)}}
		if _, err := NewRegistry(rt, fsys, ""); err == nil || !strings.Contains(err.Error(), SumsFile) {
			t.Fatalf("SumsFile %q: %v", bad, err)
		}
	}
}

// TestFirstStartInterpretsOnlyTheClaimant: with the built-in set's
// DescribedFile (taken at build time by DescribeSet) a first start on an
// empty cache decides the claim from the seeded records and compiles the
// claimant alone — no Describe run of fp4 and mamba (before mha in name
// order) nor of mha, no second validation of mha — with the same
// descriptor a Describe would record; without it, every configurator up to
// the claimant is interpreted. An entry for other bytes than SumsFile lists
// is not used.
func TestFirstStartInterpretsOnlyTheClaimant(t *testing.T) {
	ctx := context.Background()
	var read atomic.Int64
	fsys := sumsFS(t, &read)
	rt0, err := NewRuntime(ctx, Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	described, err := DescribeSet(ctx, rt0, fsys)
	_ = rt0.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := func(fsys fs.FS) (*Runtime, *Registry) {
		t.Helper()
		rt, err := NewRuntime(ctx, Config{CacheDir: t.TempDir(), RecallAnswers: true, InterpretConfigurators: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRegistry(rt, fsys, "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.ForArchitecture(ctx, "LlamaForCausalLM", "bf16")
		if err != nil || p.Name() != "mha" {
			t.Fatalf("claimant %v: %v", p, err)
		}
		return rt, r
	}
	fsys.MapFS[DescribedFile] = &fstest.MapFile{Data: described}
	rt, r := start(fsys)
	if n, v, c := rt.interprets.Load(), rt.validates.Load(), rt.compiles.Load(); n != 1 || v != 0 || c != 0 {
		t.Fatalf("with %s: %d interpreter compiles, %d validations, %d compiles; want 1, 0, 0", DescribedFile, n, v, c)
	}
	_, seeded, _ := r.Recorded("mla")
	_ = r.Close(ctx)
	_ = rt.Close(ctx)

	delete(fsys.MapFS, DescribedFile)
	rt, r = start(fsys)
	if n := rt.interprets.Load(); n != 4 {
		t.Fatalf("without %s: %d interpreter runs; want 4 (fp4, mamba, mha described, mha compiled)", DescribedFile, n)
	}
	var fresh []byte
	if _, _, err := r.describe(ctx, "mla"); err != nil {
		t.Fatal(err)
	}
	_, fresh, _ = r.Recorded("mla")
	if string(seeded) != string(fresh) || len(fresh) == 0 {
		t.Fatalf("seeded descriptor %s, Describe's %s", seeded, fresh)
	}
	_ = r.Close(ctx)
	_ = rt.Close(ctx)

	stale := strings.Replace(string(described), sum256(readWasm(t, "fp4")), strings.Repeat("0", 64), 1)
	fsys.MapFS[DescribedFile] = &fstest.MapFile{Data: []byte(stale)}
	rt, r = start(fsys)
	if n := rt.interprets.Load(); n != 2 {
		t.Fatalf("with fp4's entry for other bytes: %d interpreter runs; want 2 (fp4 described, mha compiled)", n)
	}
	_ = r.Close(ctx)
	_ = rt.Close(ctx)
}
