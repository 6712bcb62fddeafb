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
		{`{"name":"mha","version":"1","kind":"configurator","abi":1,"architectures":["LlamaForCausalLM"]}`, ""},
		{`{"name":"s","version":"1","kind":"sampler","abi":1,"architectures":[]}`, ""},
		{`{"name":"","version":"1","kind":"configurator","abi":1}`, "name"},
		{`{"name":"x","version":"","kind":"configurator","abi":1}`, "version"},
		{`{"name":"x","version":"1","kind":"tokenizer","abi":1}`, "kind"},
		{`{"name":"x","version":"1","kind":"configurator","abi":2}`, "abi 2"},
		{`{"name":"x","version":"1","kind":"configurator","abi":1,"kv_dtypes":["int4"]}`, "kv_dtypes"},
		{`{"name":"x\n","version":"1","kind":"configurator","abi":1}`, "control"},
		{`{"name":"x","version":"1","kind":"configurator","abi":1} trailing`, "trailing"},
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
	k := Buffer{Pool: "kv", Name: "k", Shape: []int64{8, 128}, DType: "bf16"}
	v := Buffer{Pool: "kv", Name: "v", Shape: []int64{8, 128}, DType: "bf16"}
	ok := Pool{Name: "kv", Unit: UnitToken, BytesPerUnit: 4096, Buffers: []Buffer{k, v}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	lie := ok
	lie.BytesPerUnit = 4097
	if err := lie.Check(); err == nil || !strings.Contains(err.Error(), "add up to 4096 bytes per token but the pool declares 4097") {
		t.Fatalf("lie: %v", err)
	}
	dup := ok
	dup.Buffers = []Buffer{k, k}
	if err := dup.Check(); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Fatalf("dup: %v", err)
	}
	foreign := ok
	foreign.Buffers = []Buffer{k, {Pool: "other", Name: "v", Shape: []int64{8, 128}, DType: "bf16"}}
	if err := foreign.Check(); err == nil {
		t.Fatal("foreign buffer accepted")
	}
}

func TestUnitJSON(t *testing.T) {
	b, err := json.Marshal([]Unit{UnitToken, UnitRequest})
	if err != nil || string(b) != `["token","request"]` {
		t.Fatalf("%s %v", b, err)
	}
	var u []Unit
	if err := json.Unmarshal(b, &u); err != nil || u[1] != UnitRequest {
		t.Fatalf("%v %v", u, err)
	}
	if err := json.Unmarshal([]byte(`["page"]`), &u); err == nil {
		t.Fatal("unknown unit accepted")
	}
}

func TestPackPtrLen(t *testing.T) {
	p, n := UnpackPtrLen(PackPtrLen(0xdeadbeef, 0x12345678))
	if p != 0xdeadbeef || n != 0x12345678 {
		t.Fatalf("%x %x", p, n)
	}
}

func TestDTypeSizes(t *testing.T) {
	for kv, want := range map[string]int64{"bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "mxfp8": 1, "fp4": 1} {
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
	f.Add([]byte(`{"name":"mha","version":"1","kind":"configurator","abi":1,"architectures":["LlamaForCausalLM"],"kv_dtypes":["bf16"]}`))
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
