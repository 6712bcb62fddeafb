//go:build wasip1

// Command badabi is a hostile plugin that reports ABI version 99.
package main

//go:wasmexport kvhost_abi_version
func abiVersion() int32 { return 99 }

func main() {}
