//go:build cuda

package cuda

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLFacts is NVML's device-wide view, which needs no CUDA context: taken
// once before the context exists (the baseline) and again on demand.
type NVMLFacts struct {
	Name          string `json:"name"`
	UUID          string `json:"uuid,omitempty"`
	Driver        string `json:"driver_version"`
	CUDADriver    int    `json:"cuda_driver_version"`
	ComputeMajor  int    `json:"compute_major"`
	ComputeMinor  int    `json:"compute_minor"`
	Total         int64  `json:"total_bytes"`
	Reserved      int64  `json:"reserved_bytes"` // v2: for system use (driver, firmware)
	Free          int64  `json:"free_bytes"`
	Used          int64  `json:"used_bytes"` // v2: allocated only
	MemoryVersion int    `json:"memory_info_version"`
}

// nvmlSession is an initialised NVML with one device handle.
type nvmlSession struct {
	dev nvml.Device
}

func nvmlErr(op string, r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("cuda: nvml %s: %s", op, r.Error())
}

func openNVML(index int) (*nvmlSession, error) {
	if err := nvmlErr("init", nvml.Init()); err != nil {
		return nil, err
	}
	d, r := nvml.DeviceGetHandleByIndex(index)
	if err := nvmlErr(fmt.Sprintf("device %d", index), r); err != nil {
		nvml.Shutdown()
		return nil, err
	}
	return &nvmlSession{dev: d}, nil
}

// facts reads everything NVML knows; memory comes from v2 memory info
// (with reserved) and falls back to v1 where v2 is unsupported.
func (s *nvmlSession) facts() (NVMLFacts, error) {
	var f NVMLFacts
	var r nvml.Return
	if f.Name, r = s.dev.GetName(); r != nvml.SUCCESS {
		return f, nvmlErr("name", r)
	}
	f.UUID, _ = s.dev.GetUUID()
	f.Driver, _ = nvml.SystemGetDriverVersion()
	f.CUDADriver, _ = nvml.SystemGetCudaDriverVersion_v2()
	f.ComputeMajor, f.ComputeMinor, _ = s.dev.GetCudaComputeCapability()
	if m, r := s.dev.GetMemoryInfo_v2(); r == nvml.SUCCESS {
		f.Total, f.Reserved, f.Free, f.Used, f.MemoryVersion = int64(m.Total), int64(m.Reserved), int64(m.Free), int64(m.Used), 2
		return f, nil
	}
	m, r := s.dev.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return f, nvmlErr("memory info", r)
	}
	f.Total, f.Free, f.Used, f.MemoryVersion = int64(m.Total), int64(m.Free), int64(m.Used), 1
	return f, nil
}

func (s *nvmlSession) close() { nvml.Shutdown() }
