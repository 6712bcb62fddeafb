//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
	"gorgonia.org/cu"

	"github.com/kvhost/kvhost/host/device"
)

// Kind is the registry name of this device.
const Kind = "cuda"

func init() {
	device.Register(Kind, func(o device.Options) (device.Device, error) { return Open(o) })
}

const (
	stageBytes = 8 << 20 // initial pinned staging ring and its device mirror
)

type mode uint8

const (
	modeEager   mode = iota
	modeRecord       // a capture is open: work runs eagerly and is recorded
	modeCapture      // EndCapture is issuing the recording under stream capture
)

// Facts are what the device learnt at open, for logs and gpu-check.
type Facts struct {
	Index int `json:"index"`
	// Baseline is NVML before the CUDA context existed; AfterContext right
	// after the primary context became current. Their Used difference is the
	// context's own memory, which cuMemGetInfo deltas never show.
	Baseline     NVMLFacts `json:"nvml_baseline"`
	AfterContext NVMLFacts `json:"nvml_after_context"`
	NVMLError    string    `json:"nvml_error,omitempty"`
	// CtxFree/CtxTotal are cuMemGetInfo right after the context was made.
	CtxFree        int64  `json:"cu_free_after_context"`
	CtxTotal       int64  `json:"cu_total"`
	DriverVersion  int    `json:"cu_driver_version"`
	ComputeMajor   int    `json:"compute_major"`
	ComputeMinor   int    `json:"compute_minor"`
	ModuleImage    string `json:"module_image"` // "fatbin" or "ptx sm_80"/"ptx sm_90"
	VMM            bool   `json:"vmm_supported"`
	Granularity    int64  `json:"vmm_granularity"`
	CublasPath     string `json:"cublas_path,omitempty"`
	CublasWhy      string `json:"cublas_found_by,omitempty"`
	CublasVersion  int    `json:"cublas_version,omitempty"`
	CublasError    string `json:"cublas_error,omitempty"`
	WorkspaceBytes int64  `json:"cublas_workspace_bytes"`
}

// Device is one NVIDIA GPU. All driver work runs on its owner goroutine.
type Device struct {
	facts Facts
	name  string

	work   chan func()
	tid    int
	mu     sync.RWMutex // held (read) across a hand-off; Close takes it to stop the owner
	closed bool

	// Owned by the owner goroutine from here on.
	dev       cu.Device
	ctx       cu.CUContext
	st        stream
	args      argBlock
	fns       map[string]function
	nvml      *nvmlSession
	blas      *cublas
	workspace cu.DevicePtr

	pin      pinned
	stageDev cu.DevicePtr
	ring     ring
	outPin   pinned // receives captured graphs' device → host copies
	mode     mode
	rec      *recording
	graphs   []*Graph
	retired  []retiredBuf
	meta     []int32

	half      cu.DevicePtr // f32 → f16/bf16 scratch feeding cuBLAS
	halfBytes int64

	allocs       map[device.Ptr]int64
	reservations map[device.Ptr]*reservation

	kern kernels
}

var (
	_ device.Device        = (*Device)(nil)
	_ device.VirtualMemory = (*Device)(nil)
	_ device.Kernels       = (*kernels)(nil)
)

// Open opens GPU o.Index: NVML baseline first, then the primary context on a
// locked owner goroutine, the stream, the kernel modules, the staging ring and
// cuBLAS (whose absence only disables the large-M GEMM path).
func Open(o device.Options) (*Device, error) {
	d := &Device{work: make(chan func()), allocs: map[device.Ptr]int64{}, reservations: map[device.Ptr]*reservation{}}
	d.kern = kernels{d: d}
	d.facts.Index = o.Index
	ready := make(chan error, 1)
	go d.loop(o.Index, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) loop(index int, ready chan<- error) {
	runtime.LockOSThread()
	d.tid = unix.Gettid()
	if err := d.init(index); err != nil {
		d.teardown()
		ready <- err
		return
	}
	ready <- nil
	for f := range d.work {
		f()
	}
}

func (d *Device) init(index int) error {
	if s, err := openNVML(index); err != nil {
		d.facts.NVMLError = err.Error()
	} else {
		d.nvml = s
		if d.facts.Baseline, err = s.facts(); err != nil {
			d.facts.NVMLError = err.Error()
		}
	}
	var err error
	if d.dev, err = cu.GetDevice(index); err != nil {
		return fmt.Errorf("cuda: device %d: %w", index, err)
	}
	if d.ctx, err = d.dev.RetainPrimaryCtx(); err != nil {
		return fmt.Errorf("cuda: retain primary context: %w", err)
	}
	if err = cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("cuda: make primary context current: %w", err)
	}
	if d.nvml != nil {
		d.facts.AfterContext, _ = d.nvml.facts()
	}
	d.facts.DriverVersion = cu.Version()
	if d.facts.ComputeMajor, d.facts.ComputeMinor, err = d.dev.ComputeCapability(); err != nil {
		return fmt.Errorf("cuda: compute capability: %w", err)
	}
	if d.name = d.facts.Baseline.Name; d.name == "" {
		if d.name, err = d.dev.Name(); err != nil {
			d.name = fmt.Sprintf("cuda:%d", index)
		}
	}
	if d.facts.CtxFree, d.facts.CtxTotal, err = cu.MemInfo(); err != nil {
		return fmt.Errorf("cuda: cuMemGetInfo: %w", err)
	}
	if d.st, err = newStream(); err != nil {
		return err
	}
	d.args = newArgBlock()
	if err = d.loadModules(); err != nil {
		return err
	}
	if d.facts.VMM, err = vmmSupported(d.dev); err == nil && d.facts.VMM {
		if d.facts.Granularity, err = vmmGranularity(index); err != nil {
			return err
		}
	}
	if err = d.growStage(stageBytes); err != nil {
		return err
	}
	ws := device.CublasWorkspaceBytes(d.facts.ComputeMajor)
	if d.workspace, err = cu.MemAlloc(ws); err != nil {
		return fmt.Errorf("cuda: cuBLAS workspace of %d bytes: %w", ws, err)
	}
	d.facts.WorkspaceBytes = ws
	if d.blas, err = openCublas(d.st, uintptr(d.workspace), ws); err != nil {
		d.facts.CublasError = err.Error()
	} else {
		d.facts.CublasPath, d.facts.CublasWhy, d.facts.CublasVersion = d.blas.Path, d.blas.Why, d.blas.Version
	}
	return nil
}

// do runs f on the owner goroutine; on the owner thread itself (inside Run,
// a capture or a replay) it calls f directly.
func (d *Device) do(f func() error) error {
	if unix.Gettid() == d.tid {
		return f()
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return errors.New("cuda: device is closed")
	}
	ch := make(chan error, 1)
	d.work <- func() { ch <- f() }
	return <-ch
}

// Run runs f on the device's owner thread, where every device call made by
// f runs without a hand-off. A model forward should run inside Run.
func (d *Device) Run(f func() error) error { return d.do(f) }

// Facts returns what the device learnt at open.
func (d *Device) Facts() Facts { return d.facts }

// NVML reads NVML's current view of the device.
func (d *Device) NVML() (NVMLFacts, error) {
	var f NVMLFacts
	err := d.do(func() error {
		if d.nvml == nil {
			return errors.New("cuda: nvml unavailable: " + d.facts.NVMLError)
		}
		var err error
		f, err = d.nvml.facts()
		return err
	})
	return f, err
}

// Info describes the device; Total is what the context can see (cuMemGetInfo).
func (d *Device) Info() device.Info {
	return device.Info{Name: d.name, Kind: Kind, Total: d.facts.CtxTotal}
}

// MemGetInfo is cuMemGetInfo: free and total bytes as the driver sees them.
func (d *Device) MemGetInfo() (free, total int64) {
	_ = d.do(func() error {
		var err error
		free, total, err = cu.MemInfo()
		return err
	})
	return free, total
}

func (d *Device) oom(requested int64) error {
	free, total, _ := cu.MemInfo()
	return &device.OutOfMemoryError{Device: d.name, Requested: requested, Free: free, Total: total}
}

// Malloc is cuMemAlloc; out of memory gives a *device.OutOfMemoryError.
func (d *Device) Malloc(size int64) (device.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("cuda: malloc of %d bytes", size)
	}
	var p device.Ptr
	err := d.do(func() error {
		if d.mode == modeCapture {
			return errors.New("cuda: cuMemAlloc during stream capture is forbidden (allocate while the capture is being recorded, before EndCapture)")
		}
		dp, err := cu.MemAlloc(size)
		if errors.Is(err, cu.OutOfMemory) {
			return d.oom(size)
		}
		if err != nil {
			return fmt.Errorf("cuda: cuMemAlloc %d bytes: %w", size, err)
		}
		p = device.Ptr(dp)
		d.allocs[p] = size
		return nil
	})
	return p, err
}

// Free is cuMemFree of a live Malloc allocation.
func (d *Device) Free(p device.Ptr) error {
	return d.do(func() error {
		if _, ok := d.allocs[p]; !ok {
			return fmt.Errorf("cuda: free of %#x, which is not the start of a live allocation", uintptr(p))
		}
		if d.mode == modeCapture {
			return errors.New("cuda: cuMemFree during stream capture is forbidden")
		}
		delete(d.allocs, p)
		if err := cu.MemFree(cu.DevicePtr(p)); err != nil {
			return fmt.Errorf("cuda: cuMemFree: %w", err)
		}
		return nil
	})
}

// ErrNotHostAddressable is returned by Bytes: device memory cannot be viewed
// from the host; use the kernels' CopyToHost.
var ErrNotHostAddressable = errors.New("cuda: device memory is not host-addressable")

// Bytes always fails on a GPU.
func (d *Device) Bytes(p device.Ptr, n int64) ([]byte, error) {
	return nil, fmt.Errorf("cuda: bytes at %#x+%d: %w", uintptr(p), n, ErrNotHostAddressable)
}

// Kernels returns the CUDA kernel set.
func (d *Device) Kernels() device.Kernels { return &d.kern }

// Sync waits for all work queued on the device's stream.
func (d *Device) Sync() error {
	return d.do(func() error {
		if d.mode != modeEager {
			return errors.New("cuda: synchronise during an open graph capture")
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		d.ring.reset()
		return nil
	})
}

// Close frees everything the device holds and stops its owner goroutine.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	ch := make(chan error, 1)
	d.work <- func() { ch <- d.teardown() }
	err := <-ch
	close(d.work)
	return err
}

func (d *Device) teardown() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if d.st.s != nil {
		keep(d.st.sync())
	}
	d.blas.close()
	for len(d.graphs) > 0 {
		keep(d.closeGraph(d.graphs[0]))
	}
	for _, r := range d.retired {
		keep(r.pin.free())
		if r.dev != 0 {
			keep(cu.MemFree(r.dev))
		}
	}
	d.retired = nil
	for base := range d.reservations {
		keep(d.release(base))
	}
	for p := range d.allocs {
		keep(cu.MemFree(cu.DevicePtr(p)))
		delete(d.allocs, p)
	}
	for _, p := range []cu.DevicePtr{d.workspace, d.stageDev, d.half} {
		if p != 0 {
			keep(cu.MemFree(p))
		}
	}
	d.workspace, d.stageDev, d.half = 0, 0, 0
	keep(d.pin.free())
	keep(d.outPin.free())
	d.pin, d.outPin = pinned{}, pinned{}
	if d.st.s != nil {
		keep(d.st.destroy())
		d.st = stream{}
	}
	if d.args.p != nil {
		d.args.free()
		d.args = argBlock{}
	}
	if d.ctx != (cu.CUContext{}) {
		keep(d.dev.ReleasePrimaryCtx())
	}
	if d.nvml != nil {
		d.nvml.close()
		d.nvml = nil
	}
	return first
}
