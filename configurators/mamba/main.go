//go:build wasip1

// Command mamba is the mamba KV-pool configurator plugin; its arithmetic lives in
// ../layout (Mamba). Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
package main

import (
	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/sdk/guest"
)

func init() { guest.RegisterConfigurator(layout.Mamba{}) }

func main() {}
