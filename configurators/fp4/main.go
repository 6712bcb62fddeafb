//go:build wasip1

// Command fp4 is the fp4 KV-pool configurator plugin; its arithmetic lives in
// ../layout (FP4). Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
package main

import (
	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/sdk/guest"
)

func init() { guest.RegisterConfigurator(layout.FP4{}) }

func main() {}
