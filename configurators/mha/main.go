//go:build wasip1

// Command mha is the mha KV-pool configurator plugin; its arithmetic lives in
// ../layout (MHA). Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
package main

import (
	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/sdk/guest"
)

func init() { guest.RegisterConfigurator(layout.MHA{}) }

func main() {}
