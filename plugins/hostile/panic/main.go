//go:build wasip1

// Command panic is a hostile configurator whose configure panics.
package main

import (
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

type panicky struct{}

func (panicky) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "hostile-panic", Version: "0.0.1", Architectures: []string{"LlamaForCausalLM"}}
}

func (panicky) Configure(sdk.ConfigureInput) (guest.Plan, error) {
	panic("hostile: deliberate panic in configure")
}

func init() { guest.RegisterConfigurator(panicky{}) }

func main() {}
