//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

// kv_launch launches f with up to KV_MAX_ARGS arguments whose values sit in
// the 8-byte slots of argv (C memory owned by the device, never the Go
// heap).
#define KV_MAX_ARGS 24
static CUresult kv_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                          unsigned bx, unsigned by, unsigned bz, unsigned shared,
                          CUstream s, unsigned long long* argv, int nargs) {
	void* params[KV_MAX_ARGS];
	for (int i = 0; i < nargs && i < KV_MAX_ARGS; i++) params[i] = &argv[i];
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}

static CUresult kv_stream_create(CUstream* s) { return cuStreamCreate(s, CU_STREAM_NON_BLOCKING); }
static CUresult kv_stream_sync(CUstream s) { return cuStreamSynchronize(s); }
static CUresult kv_stream_destroy(CUstream s) { return cuStreamDestroy(s); }

static CUresult kv_htod_async(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
	return cuMemcpyHtoDAsync(dst, src, n, s);
}
static CUresult kv_dtoh_async(void* dst, CUdeviceptr src, size_t n, CUstream s) {
	return cuMemcpyDtoHAsync(dst, src, n, s);
}

// kv_dtoh_sync and kv_htod_sync copy between pageable (Go) memory and the
// device in stream order and return when the copy is done, inside one C call
// so the Go memory is only referenced while the call runs.
static CUresult kv_dtoh_sync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = cuMemcpyDtoHAsync(dst, src, n, s);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize(s);
}
static CUresult kv_htod_sync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
	CUresult r = cuStreamSynchronize(s);
	if (r != CUDA_SUCCESS) return r;
	r = cuMemcpyHtoDAsync(dst, src, n, s);
	if (r != CUDA_SUCCESS) return r;
	return cuStreamSynchronize(s);
}

static CUresult kv_host_alloc(void** p, size_t n) { return cuMemHostAlloc(p, n, 0); }
static CUresult kv_host_free(void* p) { return cuMemFreeHost(p); }

// --- virtual memory management ---

static void kv_prop(CUmemAllocationProp* prop, int ordinal) {
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = ordinal;
}

static CUresult kv_vmm_supported(int* ok, CUdevice dev) {
	return cuDeviceGetAttribute(ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
}

static CUresult kv_granularity(size_t* g, int ordinal) {
	CUmemAllocationProp prop;
	kv_prop(&prop, ordinal);
	return cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

static CUresult kv_reserve(CUdeviceptr* p, size_t n) { return cuMemAddressReserve(p, n, 0, 0, 0); }
static CUresult kv_address_free(CUdeviceptr p, size_t n) { return cuMemAddressFree(p, n); }

// kv_map backs [p, p+n) with a new physical allocation, grants read/write
// access and drops the handle (the mapping keeps the memory alive). On
// failure nothing stays mapped or allocated.
static CUresult kv_map(CUdeviceptr p, size_t n, int ordinal) {
	CUmemAllocationProp prop;
	kv_prop(&prop, ordinal);
	CUmemGenericAllocationHandle h;
	CUresult r = cuMemCreate(&h, n, &prop, 0);
	if (r != CUDA_SUCCESS) return r;
	r = cuMemMap(p, n, 0, h, 0);
	if (r != CUDA_SUCCESS) { cuMemRelease(h); return r; }
	CUmemAccessDesc acc;
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cuMemSetAccess(p, n, &acc, 1);
	if (r != CUDA_SUCCESS) { cuMemUnmap(p, n); cuMemRelease(h); return r; }
	return cuMemRelease(h);
}

static CUresult kv_unmap(CUdeviceptr p, size_t n) { return cuMemUnmap(p, n); }

// --- stream capture and graphs ---

static CUresult kv_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}
static CUresult kv_end_capture(CUstream s, CUgraph* g) { return cuStreamEndCapture(s, g); }
static CUresult kv_instantiate(CUgraphExec* e, CUgraph g) { return cuGraphInstantiateWithFlags(e, g, 0); }
static CUresult kv_graph_upload(CUgraphExec e, CUstream s) { return cuGraphUpload(e, s); }
static CUresult kv_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
static CUresult kv_graph_destroy(CUgraph g, CUgraphExec e) {
	CUresult r = CUDA_SUCCESS;
	if (e) r = cuGraphExecDestroy(e);
	if (g) { CUresult r2 = cuGraphDestroy(g); if (r == CUDA_SUCCESS) r = r2; }
	return r;
}
static CUresult kv_graph_nodes(CUgraph g, size_t* n) { return cuGraphGetNodes(g, NULL, n); }

static const char* kv_error_name(CUresult r) {
	const char* s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// cuErr turns a CUresult into an error naming the failed operation.
func cuErr(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &DriverError{Op: op, Code: int(r), Name: C.GoString(C.kv_error_name(r))}
}

// DriverError is a failed CUDA driver call.
type DriverError struct {
	Op   string
	Code int
	Name string
}

func (e *DriverError) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code) }

// IsOutOfMemory reports whether the driver ran out of memory.
func (e *DriverError) IsOutOfMemory() bool { return e.Code == int(C.CUDA_ERROR_OUT_OF_MEMORY) }

type stream struct{ s C.CUstream }

func newStream() (stream, error) {
	var s C.CUstream
	return stream{s}, cuErr("cuStreamCreate", C.kv_stream_create(&s))
}

func (s stream) sync() error    { return cuErr("cuStreamSynchronize", C.kv_stream_sync(s.s)) }
func (s stream) destroy() error { return cuErr("cuStreamDestroy", C.kv_stream_destroy(s.s)) }

// rawFunction reads the CUfunction out of a cu.Function, which keeps it in
// its only field.
func rawFunction(f cu.Function) C.CUfunction {
	return *(*C.CUfunction)(unsafe.Pointer(&f))
}

// argBlock is C memory for launch arguments: C.KV_MAX_ARGS slots of 8
// bytes (the attention kernels take 20).
type argBlock struct {
	p     *C.ulonglong
	slots []uint64
}

func newArgBlock() argBlock {
	p := (*C.ulonglong)(C.calloc(C.KV_MAX_ARGS, 8))
	return argBlock{p: p, slots: unsafe.Slice((*uint64)(unsafe.Pointer(p)), C.KV_MAX_ARGS)}
}

func (a argBlock) free() { C.free(unsafe.Pointer(a.p)) }

func launchRaw(f C.CUfunction, d Dims, s stream, a argBlock, n int) error {
	return cuErr("cuLaunchKernel", C.kv_launch(f, C.uint(d.Grid[0]), C.uint(d.Grid[1]), C.uint(d.Grid[2]),
		C.uint(d.Block[0]), C.uint(d.Block[1]), C.uint(d.Block[2]), C.uint(d.Shared), s.s, a.p, C.int(n)))
}

func htodAsync(dst uintptr, src unsafe.Pointer, n int64, s stream) error {
	return cuErr("cuMemcpyHtoDAsync", C.kv_htod_async(C.CUdeviceptr(dst), src, C.size_t(n), s.s))
}

func dtohAsync(dst unsafe.Pointer, src uintptr, n int64, s stream) error {
	return cuErr("cuMemcpyDtoHAsync", C.kv_dtoh_async(dst, C.CUdeviceptr(src), C.size_t(n), s.s))
}

func dtohSync(dst unsafe.Pointer, src uintptr, n int64, s stream) error {
	return cuErr("cuMemcpyDtoH", C.kv_dtoh_sync(dst, C.CUdeviceptr(src), C.size_t(n), s.s))
}

func htodSync(dst uintptr, src unsafe.Pointer, n int64, s stream) error {
	return cuErr("cuMemcpyHtoD", C.kv_htod_sync(C.CUdeviceptr(dst), src, C.size_t(n), s.s))
}

// pinned is page-locked host memory from cuMemHostAlloc.
type pinned struct {
	p    unsafe.Pointer
	size int64
}

func newPinned(n int64) (pinned, error) {
	var p unsafe.Pointer
	if err := cuErr("cuMemHostAlloc", C.kv_host_alloc(&p, C.size_t(n))); err != nil {
		return pinned{}, err
	}
	return pinned{p: p, size: n}, nil
}

func (p pinned) bytes() []byte { return unsafe.Slice((*byte)(p.p), p.size) }

func (p pinned) free() error {
	if p.p == nil {
		return nil
	}
	return cuErr("cuMemFreeHost", C.kv_host_free(p.p))
}

func vmmSupported(dev cu.Device) (bool, error) {
	var ok C.int
	err := cuErr("cuDeviceGetAttribute(VMM)", C.kv_vmm_supported(&ok, C.CUdevice(dev)))
	return ok != 0, err
}

func vmmGranularity(ordinal int) (int64, error) {
	var g C.size_t
	err := cuErr("cuMemGetAllocationGranularity", C.kv_granularity(&g, C.int(ordinal)))
	return int64(g), err
}

func vmmReserve(n int64) (uintptr, error) {
	var p C.CUdeviceptr
	err := cuErr("cuMemAddressReserve", C.kv_reserve(&p, C.size_t(n)))
	return uintptr(p), err
}

func vmmAddressFree(p uintptr, n int64) error {
	return cuErr("cuMemAddressFree", C.kv_address_free(C.CUdeviceptr(p), C.size_t(n)))
}

func vmmMap(p uintptr, n int64, ordinal int) error {
	return cuErr("cuMemCreate/cuMemMap/cuMemSetAccess", C.kv_map(C.CUdeviceptr(p), C.size_t(n), C.int(ordinal)))
}

func vmmUnmap(p uintptr, n int64) error {
	return cuErr("cuMemUnmap", C.kv_unmap(C.CUdeviceptr(p), C.size_t(n)))
}

// graph is an instantiated, uploaded CUDA graph.
type graph struct {
	g C.CUgraph
	e C.CUgraphExec
}

func beginCapture(s stream) error {
	return cuErr("cuStreamBeginCapture(THREAD_LOCAL)", C.kv_begin_capture(s.s))
}

// endCapture ends the capture and, when it succeeded, instantiates and
// uploads the graph. It returns the node count.
func endCapture(s stream) (graph, int, error) {
	var g graph
	if err := cuErr("cuStreamEndCapture", C.kv_end_capture(s.s, &g.g)); err != nil {
		return graph{}, 0, err
	}
	var n C.size_t
	if err := cuErr("cuGraphGetNodes", C.kv_graph_nodes(g.g, &n)); err != nil {
		_ = g.destroy()
		return graph{}, 0, err
	}
	if err := cuErr("cuGraphInstantiateWithFlags", C.kv_instantiate(&g.e, g.g)); err != nil {
		_ = g.destroy()
		return graph{}, 0, err
	}
	if err := cuErr("cuGraphUpload", C.kv_graph_upload(g.e, s.s)); err != nil {
		_ = g.destroy()
		return graph{}, 0, err
	}
	return g, int(n), nil
}

func (g graph) launch(s stream) error { return cuErr("cuGraphLaunch", C.kv_graph_launch(g.e, s.s)) }

func (g graph) destroy() error { return cuErr("cuGraphDestroy", C.kv_graph_destroy(g.g, g.e)) }
