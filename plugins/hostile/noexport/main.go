//go:build wasip1

// Command noexport is a hostile plugin that passes the version check but
// exports nothing else.
package main

//go:wasmexport kvhost_abi_version
func abiVersion() int32 { return 1 }

func main() {}
