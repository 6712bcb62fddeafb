//go:build wasip1

// Command abi1 is a configurator as ABI 1 built it: kvhost_abi_version
// returns 1 and declare_pool / declare_buffer are imported with ABI 1's
// signatures (a unit instead of a kind, no role). A host speaking ABI 2
// must refuse it by version, not with a bare signature mismatch.
package main

import "unsafe"

//go:wasmimport kvhost declare_pool
func declarePool(namePtr, nameLen, unit int32, bytesPerUnit int64) int32

//go:wasmimport kvhost declare_buffer
func declareBuffer(poolPtr, poolLen, namePtr, nameLen, layer, shapePtr, shapeLen, dtypePtr, dtypeLen int32) int32

var name = []byte("kv")

//go:wasmexport kvhost_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport kvhost_configure
func configure(inPtr, inLen int32) int32 {
	p := int32(uintptr(unsafe.Pointer(&name[0])))
	if st := declarePool(p, 2, 0, 4); st != 0 {
		return st
	}
	shape := []int64{2}
	return declareBuffer(p, 2, p, 1, 0, int32(uintptr(unsafe.Pointer(&shape[0]))), 1, p, 2)
}

func main() {}
