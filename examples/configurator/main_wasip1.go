//go:build wasip1

package main

import "github.com/kvhost/kvhost/sdk/guest"

func init() { guest.RegisterConfigurator(GQA{}) }

func main() {}
