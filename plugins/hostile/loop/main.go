//go:build wasip1

// Command loop is a hostile configurator whose configure never returns.
package main

import (
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

type loop struct{}

var sink int

func (loop) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "hostile-loop", Version: "0.0.1", Architectures: []string{"LlamaForCausalLM"}}
}

func (loop) Configure(sdk.ConfigureInput) (guest.Plan, error) {
	for i := 0; ; i++ {
		sink = i
	}
}

func init() { guest.RegisterConfigurator(loop{}) }

func main() {}
