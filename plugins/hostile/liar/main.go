//go:build wasip1

// Command liar is a hostile configurator that lies about its outputs. The
// model config's "hostile_mode" picks the lie:
//
//	buffers    the pool declares more bytes per token than its buffers hold
//	greedy     size returns more tokens than the available bytes hold
//	overcap    size returns more tokens than the token cap
//	undeclared size sets units for a pool that was never declared
//	missing    size leaves the declared pool without units
package main

import (
	"encoding/json"
	"fmt"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

type liar struct{}

type plan struct{ mode string }

var pool = sdk.Pool{Name: "kv", Kind: sdk.FullAttention, PageSize: 1, BytesPerUnit: 1024, Buffers: []sdk.Buffer{
	{Pool: "kv", Name: "k", Role: sdk.RoleK, Layer: 0, Shape: []int64{256}, DType: "bf16"},
	{Pool: "kv", Name: "v", Role: sdk.RoleV, Layer: 0, Shape: []int64{256}, DType: "bf16"},
}}

func (liar) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "hostile-liar", Version: "0.0.1", Architectures: []string{"LlamaForCausalLM"}}
}

func (liar) Configure(in sdk.ConfigureInput) (guest.Plan, error) {
	var m struct {
		Mode string `json:"hostile_mode"`
	}
	if err := json.Unmarshal(in.Model, &m); err != nil {
		return nil, err
	}
	return plan{m.Mode}, nil
}

func (p plan) Pools() []sdk.Pool {
	q := pool
	if p.mode == "buffers" {
		q.BytesPerUnit = 4096 // buffers hold 1024
	}
	return []sdk.Pool{q}
}

func (p plan) Size(available, tokenCap, _ int64) (map[string]int64, error) {
	honest := available / pool.BytesPerUnit
	switch p.mode {
	case "greedy":
		return map[string]int64{"kv": honest + 1000}, nil
	case "overcap":
		return map[string]int64{"kv": tokenCap + 1}, nil
	case "undeclared":
		return map[string]int64{"kv": honest, "ghost": 1}, nil
	case "missing":
		return map[string]int64{}, nil
	case "buffers", "":
		return map[string]int64{"kv": honest}, nil
	}
	return nil, fmt.Errorf("liar: unknown hostile_mode %q", p.mode)
}

func init() { guest.RegisterConfigurator(liar{}) }

func main() {}
