//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/kvhost/kvhost/sdk"
)

// dispatcher is set once by RegisterConfigurator from the plugin's init().
var dispatcher *Dispatcher

// pinned keeps kvhost_malloc blocks reachable until kvhost_free.
var pinned = map[uint32][]byte{}

// lastErrBuf keeps the bytes kvhost_last_error points at reachable.
var lastErrBuf []byte

// RegisterConfigurator installs the plugin's implementation. Call it once,
// from init(); a second call panics.
func RegisterConfigurator(c Configurator) {
	if dispatcher != nil {
		panic("guest: RegisterConfigurator called twice")
	}
	dispatcher = NewDispatcher(c, wasmHost{})
}

// Log sends a message to the host log at the given level
// (sdk.LogDebug..sdk.LogError).
func Log(level int32, msg string) { wasmHost{}.Log(level, msg) }

func ptrOf(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// blockAt returns the first n bytes of the kvhost_malloc block at ptr; the
// ABI requires inputs to live in such a block, so no raw pointer is ever
// turned back into a Go pointer.
func blockAt(ptr, n int32) ([]byte, bool) {
	b, ok := pinned[uint32(ptr)]
	if !ok || n < 0 || int(n) > len(b) {
		return nil, false
	}
	return b[:n], true
}

//go:wasmexport kvhost_abi_version
func exportABIVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvhost_describe
func exportDescribe() int64 {
	if dispatcher == nil {
		return 0
	}
	b := dispatcher.DescribeJSON()
	return int64(sdk.PackPtrLen(ptrOf(b), uint32(len(b))))
}

//go:wasmexport kvhost_malloc
func exportMalloc(size int32) int32 {
	if size < 0 {
		return 0
	}
	if size == 0 {
		size = 1
	}
	b := make([]byte, size)
	p := ptrOf(b)
	pinned[p] = b
	return int32(p)
}

//go:wasmexport kvhost_free
func exportFree(ptr int32) { delete(pinned, uint32(ptr)) }

//go:wasmexport kvhost_last_error
func exportLastError() int64 {
	if dispatcher == nil {
		lastErrBuf = []byte("guest: no configurator registered (call guest.RegisterConfigurator from init)")
	} else {
		lastErrBuf = []byte(dispatcher.LastError())
	}
	return int64(sdk.PackPtrLen(ptrOf(lastErrBuf), uint32(len(lastErrBuf))))
}

//go:wasmexport kvhost_configure
func exportConfigure(inPtr, inLen int32) int32 {
	if dispatcher == nil {
		return sdk.StatusGuestError
	}
	b, ok := blockAt(inPtr, inLen)
	if !ok {
		dispatcher.lastErr = "guest: configure input is not inside a kvhost_malloc block"
		return sdk.StatusBadPointer
	}
	// Copy: the host frees the input block after the call, and the plan may
	// keep slices of it.
	return dispatcher.Configure(append([]byte(nil), b...))
}

//go:wasmexport kvhost_size
func exportSize(available, tokenCap, requestCap int64) int32 {
	if dispatcher == nil {
		return sdk.StatusGuestError
	}
	return dispatcher.Size(available, tokenCap, requestCap)
}

//go:wasmimport kvhost declare_pool
func importDeclarePool(namePtr, nameLen, kindPtr, kindLen int32, pageSize, window, bytesPerUnit int64) int32

//go:wasmimport kvhost declare_buffer
func importDeclareBuffer(poolPtr, poolLen, namePtr, nameLen, rolePtr, roleLen, layer, shapePtr, shapeLen, dtypePtr, dtypeLen int32) int32

//go:wasmimport kvhost set_units
func importSetUnits(poolPtr, poolLen int32, units int64) int32

//go:wasmimport kvhost log
func importLog(level, ptr, n int32)

// wasmHost implements Host over the wasm imports. Strings and the shape are
// passed as (ptr, len) into live Go memory; they stay reachable for the
// duration of the call because they are arguments.
type wasmHost struct{}

func strPtr(s string) (int32, int32) {
	if len(s) == 0 {
		return 0, 0
	}
	return int32(uintptr(unsafe.Pointer(unsafe.StringData(s)))), int32(len(s))
}

func (wasmHost) DeclarePool(name string, kind sdk.PoolKind, pageSize, window, bytesPerUnit int64) int32 {
	p, n := strPtr(name)
	kp, kn := strPtr(string(kind))
	return importDeclarePool(p, n, kp, kn, pageSize, window, bytesPerUnit)
}

func (wasmHost) DeclareBuffer(pool, name string, role sdk.Role, layer int32, shape []int64, dtype string) int32 {
	pp, pn := strPtr(pool)
	np, nn := strPtr(name)
	rp, rn := strPtr(string(role))
	dp, dn := strPtr(dtype)
	var sp int32
	if len(shape) > 0 {
		sp = int32(uintptr(unsafe.Pointer(&shape[0])))
	}
	return importDeclareBuffer(pp, pn, np, nn, rp, rn, layer, sp, int32(len(shape)), dp, dn)
}

func (wasmHost) SetUnits(pool string, units int64) int32 {
	p, n := strPtr(pool)
	return importSetUnits(p, n, units)
}

func (wasmHost) Log(level int32, msg string) {
	p, n := strPtr(msg)
	importLog(level, p, n)
}
