package model

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/device/dry"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

// TestRegistry: the Llama family is registered under its GGUF and Hugging
// Face names, every entry resolves from each of its names, and an
// unsupported name's error lists what is supported.
func TestRegistry(t *testing.T) {
	for _, name := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		if !slices.Contains(Archs(), name) {
			t.Errorf("architecture %s is not registered (have %v)", name, Archs())
		}
	}
	for _, name := range Archs() {
		a, ok := LookupArch(name)
		if !ok || a.Name != name {
			t.Fatalf("LookupArch(%q) = %v, %v", name, a, ok)
		}
		for _, g := range a.GGUF {
			if got, ok := lookupIn(ggufArch, g); !ok || got != a {
				t.Errorf("GGUF name %s resolves to %v", g, got)
			}
		}
		for _, h := range a.HF {
			if got, ok := lookupIn(hfArch, h); !ok || got != a {
				t.Errorf("HF class %s resolves to %v", h, got)
			}
		}
	}
	_, err := ConfigFromHF([]byte(`{"architectures":["GPTJForCausalLM"]}`), "config.json")
	if err == nil || !strings.Contains(err.Error(), "GPTJForCausalLM") || !strings.Contains(err.Error(), "Qwen3ForCausalLM") {
		t.Fatalf("unsupported HF class: %v", err)
	}
	if _, err := (Config{Arch: "gpt-j"}).arch(); err == nil || !strings.Contains(err.Error(), "llama") {
		t.Fatalf("unregistered Config.Arch: %v", err)
	}
}

// TestRegisterRefusesDuplicatesAndGaps: a second entry under a taken name,
// GGUF name or HF class, or an entry missing a function, panics and leaves
// the registry as it was.
func TestRegisterRefusesDuplicatesAndGaps(t *testing.T) {
	llama, _ := LookupArch("llama")
	before := Archs()
	for _, c := range []struct {
		name string
		edit func(a *Arch)
	}{
		{"same name", func(a *Arch) { a.GGUF, a.HF = []string{"x-gguf"}, []string{"XForCausalLM"} }},
		{"same GGUF name", func(a *Arch) { a.Name, a.GGUF, a.HF = "x", []string{"qwen2"}, []string{"XForCausalLM"} }},
		{"same HF class", func(a *Arch) { a.Name, a.GGUF, a.HF = "x", nil, []string{"MistralForCausalLM"} }},
		{"no layers", func(a *Arch) { a.Name, a.GGUF, a.HF, a.Layers = "x", nil, []string{"XForCausalLM"}, nil }},
		{"no HF class", func(a *Arch) { a.Name, a.GGUF, a.HF = "x", nil, nil }},
	} {
		a := *llama
		c.edit(&a)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: register did not panic", c.name)
				}
			}()
			register(&a)
		}()
		if got := Archs(); !slices.Equal(got, before) {
			t.Fatalf("%s: registry changed to %v", c.name, got)
		}
		if _, ok := lookupIn(hfArch, "XForCausalLM"); ok {
			t.Fatalf("%s: a refused entry's HF class was registered", c.name)
		}
	}
}

// TestDryRunAllocatesAsServe: the model built by NewDry over the dry device
// makes the caching allocator requests a loaded model makes — its
// workspace, a prefill forward with logprobs, a mixed batch, and decode
// graph capture — to the byte, with no weights in memory.
func TestDryRunAllocatesAsServe(t *testing.T) {
	r := load(t, writeTiny(t, "f32"), 64)
	c := r.m.Config
	dev := dry.New(cpu.Sizer{Threads: runtime.GOMAXPROCS(0)})
	act := alloc.New("caching", dev)
	d, err := NewDry(c, dev, act)
	if err != nil {
		t.Fatal(err)
	}
	dpools := kvtest.MHA(t, alloc.NewDirect("kv", dev), c.KVNeeds(), sdk.KVFP32, 16, 64)
	if got, want := act.Stats(), r.act.Stats(); got.Reserved != want.Reserved || got.Allocated != want.Allocated {
		t.Fatalf("after load: dry reserved/allocated %d/%d, served %d/%d", got.Reserved, got.Allocated, want.Reserved, want.Allocated)
	}
	if d.WeightBytes() != 0 || len(d.Tensors()) != len(r.m.Tensors()) {
		t.Fatalf("dry model holds %d weight bytes and %d tensors; the loaded one %d tensors", d.WeightBytes(), len(d.Tensors()), len(r.m.Tensors()))
	}
	pages, err := r.pool.Grow(nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	dpg, err := dpools.TokenPools()[0].Grow(nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int32, 150)
	for i := range toks {
		toks[i] = int32(1 + i*7%200)
	}
	batches := [][]Seq{
		{{Tokens: toks, Start: 0, Pages: one(pages), LogitRows: 150}},
		{{Tokens: toks[:1], Start: 150, Pages: one(pages), LogitRows: 1}, {Tokens: toks[:90], Start: 10, Pages: one(pages), LogitRows: 1}},
	}
	for i, b := range batches {
		r.act.ResetPeak()
		act.ResetPeak()
		rows := 0
		for _, s := range b {
			rows += s.LogitRows
		}
		if err := r.m.Forward(r.pools, b, make([]float32, rows*c.Vocab)); err != nil {
			t.Fatal(err)
		}
		db := slices.Clone(b)
		for j := range db {
			db[j].Pages = one(dpg)
		}
		if err := d.Forward(dpools, db, nil); err != nil {
			t.Fatal(err)
		}
		got, want := act.Stats(), r.act.Stats()
		if got.PeakReserved != want.PeakReserved || got.PeakAllocated != want.PeakAllocated || got.NumAllocs != want.NumAllocs || got.PeakRequest != want.PeakRequest {
			t.Fatalf("batch %d: dry peak reserved/allocated/allocs/request %d/%d/%d/%d, served %d/%d/%d/%d", i,
				got.PeakReserved, got.PeakAllocated, got.NumAllocs, got.PeakRequest, want.PeakReserved, want.PeakAllocated, want.NumAllocs, want.PeakRequest)
		}
	}
	g, err := r.m.CaptureDecodeGraphs(r.pools, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dg, err := d.CaptureDecodeGraphs(dpools, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	defer dg.Close()
	if dg.PoolBytes() != g.PoolBytes() || g.PoolBytes() == 0 {
		t.Fatalf("dry graph pool %d bytes, served %d", dg.PoolBytes(), g.PoolBytes())
	}
}
