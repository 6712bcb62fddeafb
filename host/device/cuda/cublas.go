//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl -lcuda
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// Our own minimal cuBLAS declarations: no cuBLAS headers are needed to build.
typedef void* kv_cublasHandle;
typedef int (*kv_create_fn)(kv_cublasHandle*);
typedef int (*kv_destroy_fn)(kv_cublasHandle);
typedef int (*kv_set_stream_fn)(kv_cublasHandle, CUstream);
typedef int (*kv_set_workspace_fn)(kv_cublasHandle, void*, size_t);
typedef int (*kv_get_version_fn)(kv_cublasHandle, int*);
typedef int (*kv_gemm_ex_fn)(kv_cublasHandle, int, int, int, int, int,
                             const void*, const void*, int, int, const void*, int, int,
                             const void*, void*, int, int, int, int);

typedef struct {
	void* lt;
	void* blas;
	kv_cublasHandle h;
	kv_create_fn create;
	kv_destroy_fn destroy;
	kv_set_stream_fn set_stream;
	kv_set_workspace_fn set_workspace;
	kv_get_version_fn get_version;
	kv_gemm_ex_fn gemm_ex;
} kv_cublas;

// kv_cublas_open dlopens Lt (RTLD_GLOBAL, so cuBLAS's NEEDED entry resolves
// to it) and cuBLAS, resolves the symbols and creates a handle. It returns 0,
// or 1 when a library is missing (err holds dlerror), 2 when a symbol is
// missing, or 100+status when cublasCreate fails.
static int kv_cublas_open(kv_cublas* c, const char* lt, const char* blas, char* err, int errlen) {
	c->lt = dlopen(lt, RTLD_NOW | RTLD_GLOBAL);
	if (!c->lt) { snprintf(err, errlen, "%s", dlerror()); return 1; }
	c->blas = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
	if (!c->blas) { snprintf(err, errlen, "%s", dlerror()); dlclose(c->lt); c->lt = NULL; return 1; }
	c->create = (kv_create_fn)dlsym(c->blas, "cublasCreate_v2");
	c->destroy = (kv_destroy_fn)dlsym(c->blas, "cublasDestroy_v2");
	c->set_stream = (kv_set_stream_fn)dlsym(c->blas, "cublasSetStream_v2");
	c->set_workspace = (kv_set_workspace_fn)dlsym(c->blas, "cublasSetWorkspace_v2");
	c->get_version = (kv_get_version_fn)dlsym(c->blas, "cublasGetVersion_v2");
	c->gemm_ex = (kv_gemm_ex_fn)dlsym(c->blas, "cublasGemmEx");
	if (!c->create || !c->destroy || !c->set_stream || !c->gemm_ex) {
		snprintf(err, errlen, "a cuBLAS symbol is missing in %s", blas);
		dlclose(c->blas); dlclose(c->lt); c->blas = c->lt = NULL;
		return 2;
	}
	int st = c->create(&c->h);
	if (st != 0) {
		snprintf(err, errlen, "cublasCreate_v2 returned %d", st);
		dlclose(c->blas); dlclose(c->lt); c->blas = c->lt = NULL;
		return 100 + st;
	}
	return 0;
}

static int kv_cublas_setup(kv_cublas* c, CUstream s, CUdeviceptr ws, size_t wsBytes, int* version) {
	int st = c->set_stream(c->h, s);
	if (st != 0) return st;
	if (c->set_workspace && wsBytes > 0) {
		st = c->set_workspace(c->h, (void*)ws, wsBytes);
		if (st != 0) return st;
	}
	*version = 0;
	if (c->get_version) c->get_version(c->h, version);
	return 0;
}

// kv_gemm: C[m×n] (col-major, f32) = op(A)[m×k] · op(B)[k×n] with f32 compute.
static int kv_gemm(kv_cublas* c, int transa, int transb, int m, int n, int k,
                   CUdeviceptr A, int atype, int lda, CUdeviceptr B, int btype, int ldb,
                   CUdeviceptr C, int ldc) {
	const float alpha = 1.f, beta = 0.f;
	// CUDA_R_32F = 0 for C; CUBLAS_COMPUTE_32F = 68; CUBLAS_GEMM_DEFAULT = -1.
	return c->gemm_ex(c->h, transa, transb, m, n, k, &alpha, (const void*)A, atype, lda,
	                  (const void*)B, btype, ldb, &beta, (void*)C, 0, ldc, 68, -1);
}

static void kv_cublas_close(kv_cublas* c) {
	if (c->h && c->destroy) c->destroy(c->h);
	if (c->blas) dlclose(c->blas);
	if (c->lt) dlclose(c->lt);
	c->h = NULL; c->blas = c->lt = NULL;
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// cudaDataType codes (library_types.h), fixed numbers across releases.
const (
	cudaR32F  = 0
	cudaR16F  = 2
	cudaR16BF = 14
	opN       = 0
	opT       = 1
)

// cublas is a dlopened cuBLAS with one handle bound to the device stream and
// a fixed workspace, so its calls can be captured into graphs.
type cublas struct {
	c       *C.kv_cublas // C memory: the struct holds C pointers only
	Path    string
	Why     string
	Version int
	Tried   []string
}

// openCublas walks CublasCandidates and keeps the first that loads.
func openCublas(s stream, ws uintptr, wsBytes int64) (*cublas, error) {
	env := SearchEnv{
		Override: os.Getenv("KVHOST_CUBLAS_DIR"), Home: os.Getenv("HOME"),
		VirtualEnv: os.Getenv("VIRTUAL_ENV"), CondaPrefix: os.Getenv("CONDA_PREFIX"),
		Glob: func(p string) []string { m, _ := filepath.Glob(p); return m },
	}
	cb := &cublas{c: (*C.kv_cublas)(C.calloc(1, C.size_t(unsafe.Sizeof(C.kv_cublas{}))))}
	errBuf := (*C.char)(C.calloc(1, 512))
	defer C.free(unsafe.Pointer(errBuf))
	for _, cand := range CublasCandidates(env) {
		if strings.Contains(cand.Blas, "/") {
			if _, err := os.Stat(cand.Blas); err != nil {
				continue
			}
		}
		lt, blas := C.CString(cand.Lt), C.CString(cand.Blas)
		rc := C.kv_cublas_open(cb.c, lt, blas, errBuf, 512)
		C.free(unsafe.Pointer(lt))
		C.free(unsafe.Pointer(blas))
		if rc != 0 {
			cb.Tried = append(cb.Tried, cand.Blas+": "+C.GoString(errBuf))
			continue
		}
		var ver C.int
		if st := C.kv_cublas_setup(cb.c, s.s, C.CUdeviceptr(ws), C.size_t(wsBytes), &ver); st != 0 {
			C.kv_cublas_close(cb.c)
			cb.Tried = append(cb.Tried, fmt.Sprintf("%s: stream/workspace setup returned status %d", cand.Blas, int(st)))
			continue
		}
		cb.Path, cb.Why, cb.Version = cand.Blas, cand.Why, int(ver)
		return cb, nil
	}
	C.free(unsafe.Pointer(cb.c))
	return nil, fmt.Errorf("cuda: no usable cuBLAS (tried %d candidates): %s", len(cb.Tried), strings.Join(cb.Tried, "; "))
}

// gemmRowMajor computes out[m, n] = x[m, k] · wᵀ for a row-major weight
// w [n, k] and row-major x and out: in cuBLAS's column-major view that is
// outᵀ[n×m] = op_T(w)[n×k] · xᵀ[k×m].
func (cb *cublas) gemmRowMajor(out, x uintptr, xType int, w uintptr, wType int, m, n, k int) error {
	st := C.kv_gemm(cb.c, opT, opN, C.int(n), C.int(m), C.int(k),
		C.CUdeviceptr(w), C.int(wType), C.int(k),
		C.CUdeviceptr(x), C.int(xType), C.int(k),
		C.CUdeviceptr(out), C.int(n))
	if st != 0 {
		return fmt.Errorf("cuda: cublasGemmEx m=%d n=%d k=%d types %d/%d: status %d", m, n, k, wType, xType, int(st))
	}
	return nil
}

func (cb *cublas) close() {
	if cb == nil || cb.c == nil {
		return
	}
	C.kv_cublas_close(cb.c)
	C.free(unsafe.Pointer(cb.c))
	cb.c = nil
}
