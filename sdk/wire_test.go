package sdk

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseDescriptor(t *testing.T) {
	tests := []struct {
		in, err string
	}{
		{`{"name":"mha","version":"1","kind":"configurator","abi":2,"architectures":["LlamaForCausalLM"]}`, ""},
		{`{"name":"s","version":"1","kind":"sampler","abi":2,"architectures":[]}`, ""},
		{`{"name":"","version":"1","kind":"configurator","abi":2}`, "name"},
		{`{"name":"x","version":"","kind":"configurator","abi":2}`, "version"},
		{`{"name":"x","version":"1","kind":"tokenizer","abi":2}`, "kind"},
		{`{"name":"x","version":"1","kind":"configurator","abi":1}`, "abi 1"},
		{`{"name":"x","version":"1","kind":"configurator","abi":2,"kv_dtypes":["fp4","f32"]}`, ""},
		{`{"name":"x","version":"1","kind":"configurator","abi":2,"kv_dtypes":["int4"]}`, "kv_dtypes"},
		{`{"name":"x\n","version":"1","kind":"configurator","abi":2}`, "control"},
		{`{"name":"x","version":"1","kind":"configurator","abi":2} trailing`, "trailing"},
		{`[]`, "descriptor"},
	}
	for _, tt := range tests {
		_, err := ParseDescriptor([]byte(tt.in))
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: err = %v, want %q", tt.in, err, tt.err)
		}
	}
}

func TestParseConfigureInput(t *testing.T) {
	in, err := ParseConfigureInput([]byte(`{"model":{"num_hidden_layers":2},"host":{"kv_dtype":"fp8_e4m3"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if in.Host != (HostFacts{KVDType: "fp8_e4m3", PageSize: 1, TPSize: 1, ContextLength: 8192, SWAFullTokensRatio: 0.8, MambaFullMemoryRatio: 0.9}) {
		t.Fatalf("defaults not filled: %+v", in.Host)
	}
	// ABI 1's fp4 is read as nvfp4.
	in, err = ParseConfigureInput([]byte(`{"model":{},"host":{"kv_dtype":"fp4","max_running_requests":32,"chunked_prefill_size":512}}`))
	if err != nil || in.Host.KVDType != KVNVFP4 || in.Host.MaxRunningRequests != 32 || in.Host.ChunkedPrefill != 512 {
		t.Fatalf("fp4 alias: %+v %v", in.Host, err)
	}
	for _, bad := range []string{
		`{"model":[1],"host":{}}`,
		`{"host":{}}`,
		`{"model":{},"host":{"kv_dtype":"int4"}}`,
		`{"model":{},"host":{"page_size":-1}}`,
		`{"model":{},"host":{"tp_size":2000}}`,
		`{"model":{},"host":{"swa_full_tokens_ratio":1.5}}`,
		`{"model":{},"host":{"swa_full_tokens_ratio":-0.1}}`,
		`{"model":{},"host":{"mamba_full_memory_ratio":-1}}`,
		`{"model":{},"host":{"mamba_full_memory_ratio":101}}`,
		`{"model":{},"host":{"draft_layers":65}}`,
		`{"model":{},"host":{"max_running_requests":-1}}`,
		`{"model":{},"host":{"chunked_prefill_size":-2}}`,
		`not json`,
	} {
		if _, err := ParseConfigureInput([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestBufferBytes(t *testing.T) {
	tests := []struct {
		b    Buffer
		want int64
		err  string
	}{
		{Buffer{Pool: "kv", Name: "k", Shape: []int64{8, 128}, DType: "bf16"}, 2048, ""},
		{Buffer{Pool: "kv", Name: "k", Shape: []int64{8, 64}, DType: "fp4x2"}, 512, ""},
		{Buffer{Pool: "s", Name: "t", Shape: []int64{8, 128, 128}, DType: "fp32"}, 524288, ""},
		{Buffer{Pool: "kv", Name: "k", Shape: []int64{8, 0}, DType: "bf16"}, 0, "dimension 0"},
		{Buffer{Pool: "kv", Name: "k", Shape: nil, DType: "bf16"}, 0, "0 dims"},
		{Buffer{Pool: "kv", Name: "k", Shape: []int64{1}, DType: "fp4"}, 0, "unknown dtype"},
		{Buffer{Pool: "kv", Name: "k", Layer: -2, Shape: []int64{1}, DType: "bf16"}, 0, "layer -2"},
		{Buffer{Pool: "kv", Name: "k", Shape: []int64{1 << 31, 1 << 31, 1 << 2}, DType: "int64"}, 0, "overflows"},
	}
	for _, tt := range tests {
		got, err := tt.b.Bytes()
		if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%+v: %d, %v; want %d, %q", tt.b, got, err, tt.want, tt.err)
		}
	}
}

func TestPoolCheck(t *testing.T) {
	k := Buffer{Pool: "kv", Name: "k", Role: RoleK, Shape: []int64{8, 128}, DType: "bf16"}
	v := Buffer{Pool: "kv", Name: "v", Role: RoleV, Shape: []int64{8, 128}, DType: "bf16"}
	ok := Pool{Name: "kv", Kind: FullAttention, PageSize: 16, BytesPerUnit: 4096, Buffers: []Buffer{k, v}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	state := Pool{Name: "s", Kind: RecurrentState, PageSize: 1, BytesPerUnit: 16, Buffers: []Buffer{
		{Pool: "s", Name: "conv", Role: RoleConv, Shape: []int64{4}, DType: "bf16"},
		{Pool: "s", Name: "ssm", Role: RoleSSM, Shape: []int64{2}, DType: "fp32"}}}
	if err := state.Check(); err != nil || state.Unit() != UnitRequest || ok.Unit() != UnitToken {
		t.Fatalf("state pool: %v (units %v %v)", err, state.Unit(), ok.Unit())
	}
	bad := func(name string, mutate func(p *Pool), want string) {
		t.Helper()
		p := ok
		p.Buffers = append([]Buffer(nil), ok.Buffers...)
		mutate(&p)
		if err := p.Check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", name, err, want)
		}
	}
	bad("lie", func(p *Pool) { p.BytesPerUnit = 4097 }, "add up to 4096 bytes per token but the pool declares 4097")
	bad("dup", func(p *Pool) { p.Buffers = []Buffer{k, k} }, "declared twice")
	bad("foreign", func(p *Pool) { p.Buffers[1].Pool = "other" }, "of pool other")
	bad("kind", func(p *Pool) { p.Kind = "paged" }, `kind "paged"`)
	bad("page", func(p *Pool) { p.PageSize = 0 }, "page_size 0")
	bad("window on full", func(p *Pool) { p.Window = 8 }, "window 8 on a full pool")
	bad("window pool without window", func(p *Pool) { p.Kind = SlidingWindow }, "needs window")
	bad("state page", func(p *Pool) { p.Kind = RecurrentState; p.Buffers = nil }, "page size is one slot")
	bad("role", func(p *Pool) { p.Buffers[1].Role = RoleConv }, `role "conv", a full pool holds`)
	bad("no role", func(p *Pool) { p.Buffers[1].Role = "" }, `role ""`)
	bad("shared k", func(p *Pool) { p.Buffers[0].Layer = -1 }, "layer -1 (shared) is for workspace buffers")
	w := ok
	w.Kind, w.Window = SlidingWindow, 4096
	ws := Buffer{Pool: "kv", Name: "scratch", Role: RoleWorkspace, Layer: -1, Shape: []int64{4}, DType: "uint8"}
	w.Buffers = []Buffer{k, v, ws}
	w.BytesPerUnit += 4
	if err := w.Check(); err != nil {
		t.Fatalf("window pool with a shared workspace: %v", err)
	}
}

func TestCanonicalKVDType(t *testing.T) {
	for in, want := range map[string]string{"fp4": "nvfp4", "nvfp4": "nvfp4", "f32": "fp32", "f16": "fp16", "bf16": "bf16", "int4": "int4"} {
		if got := CanonicalKVDType(in); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
	d := Descriptor{KVDTypes: []string{"fp4"}}
	if !d.AcceptsKVDType("nvfp4") || !d.AcceptsKVDType("fp4") || d.AcceptsKVDType("bf16") {
		t.Fatalf("alias acceptance: %v", d.AcceptedKVDTypes())
	}
}
func TestDTypeSizes(t *testing.T) {
	for kv, want := range map[string]int64{"bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "mxfp8": 1, "fp4": 1, "nvfp4": 1} {
		if got, ok := KVElementSize(kv); !ok || got != want {
			t.Errorf("%s: %d", kv, got)
		}
		st, ok := KVStorageDType(kv)
		if _, known := DTypeSize(st); !ok || !known {
			t.Errorf("%s stores as unknown dtype %q", kv, st)
		}
	}
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(`{"name":"mha","version":"1","kind":"configurator","abi":2,"architectures":["LlamaForCausalLM"],"kv_dtypes":["bf16"]}`))
	f.Add([]byte(`{"name":"\u0000"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescriptor(b)
		if err != nil {
			return
		}
		if d.Validate() != nil {
			t.Fatalf("parsed descriptor does not validate: %+v", d)
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDescriptor(again); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseConfigureInput(f *testing.F) {
	f.Add([]byte(`{"model":{"num_hidden_layers":32},"host":{"kv_dtype":"bf16","page_size":64,"tp_size":8}}`))
	f.Add([]byte(`{"model":{},"host":{"context_length":0}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := ParseConfigureInput(b)
		if err != nil {
			return
		}
		if err := in.Host.Validate(); err != nil {
			t.Fatalf("parsed input has invalid host facts: %v", err)
		}
		if !json.Valid(in.Model) {
			t.Fatal("model is not valid JSON")
		}
	})
}
