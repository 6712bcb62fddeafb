//go:build wasip1

// Command membomb is a hostile configurator that allocates until the host's
// memory limit stops it.
package main

import (
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

type bomb struct{}

var hoard [][]byte

func (bomb) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "hostile-membomb", Version: "0.0.1", Architectures: []string{"LlamaForCausalLM"}}
}

func (bomb) Configure(sdk.ConfigureInput) (guest.Plan, error) {
	for {
		b := make([]byte, 4<<20)
		for i := range b {
			b[i] = byte(i)
		}
		hoard = append(hoard, b)
	}
}

func init() { guest.RegisterConfigurator(bomb{}) }

func main() {}
