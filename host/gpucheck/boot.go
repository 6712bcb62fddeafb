//go:build cuda

package gpucheck

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/device/cuda"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plan"
)

// BootResult is serve's startup (host/boot.Build on the CUDA device): the
// ledger's phases and invariants, next to NVML's view of the same GPU.
type BootResult struct {
	Model  string         `json:"model"`
	Config boot.Config    `json:"config"`
	Phases []ledger.Phase `json:"phases"`
	// CheckError is ledger.Check's verdict on the final snapshot (phases
	// chain and balance; allocators explained; held + outside = total − free).
	CheckError       string  `json:"ledger_check_error,omitempty"`
	LedgerUsed       int64   `json:"ledger_total_minus_free"`
	AllocatorBytes   int64   `json:"ledger_allocator_bytes"`
	OutsideBytes     int64   `json:"ledger_outside_bytes"`
	NVMLUsed         int64   `json:"nvml_used"`
	NVMLTotal        int64   `json:"nvml_total"`
	NVMLError        string  `json:"nvml_error,omitempty"`
	Policy           string  `json:"policy"`
	KVTokens         int     `json:"kv_tokens"`
	KVCellBytes      int64   `json:"kv_cell_bytes"`
	GraphBuckets     []int   `json:"graph_buckets"`
	GraphPoolBytes   int64   `json:"graph_pool_bytes"`
	HeadroomBytes    int64   `json:"headroom_bytes"`
	ProfilePeakBytes int64   `json:"profile_peak_bytes"`
	Seconds          float64 `json:"-"`
	Error            string  `json:"error,omitempty"`
}

// Boot runs host/boot.Build with cfg (Device "cuda": a second device
// instance on the same GPU, so the ledger counts this one's memory as
// outside), checks the ledger and reads NVML through d.
func Boot(d *cuda.Device, cfg boot.Config) BootResult {
	r := BootResult{Model: cfg.Model, Config: cfg}
	s, err := boot.Build(cfg, nil, io.Discard)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer s.Close(context.Background())
	snap := s.Ledger.Snapshot()
	r.Phases = snap.Phases
	if err := ledger.Check(snap); err != nil {
		r.CheckError = err.Error()
	}
	r.LedgerUsed = snap.TotalBytes - snap.FreeBytes
	for _, u := range snap.Allocators {
		r.AllocatorBytes += u.DeviceBytes
	}
	r.OutsideBytes = snap.Outside()
	if nv, err := d.NVML(); err != nil {
		r.NVMLError = err.Error()
	} else {
		r.NVMLUsed, r.NVMLTotal = nv.Used, nv.Total
	}
	r.KVTokens, r.KVCellBytes = s.Budget.Tokens, s.Budget.KVConfigurator.CellBytes
	r.Policy, r.GraphBuckets = s.Budget.Policy, s.Budget.GraphBuckets
	r.GraphPoolBytes, r.HeadroomBytes, r.ProfilePeakBytes = s.Budget.GraphPoolBytes, s.Budget.HeadroomBytes, s.Budget.ProfilePeakBytes
	return r
}

// PlanResult is `kvhost plan`'s figure for a GPU preset beside the tokens
// the CUDA device obtained for the same model and knobs.
type PlanResult struct {
	Preset         string `json:"preset"`
	PlanTokens     int    `json:"plan_tokens"`
	PlanPolicy     string `json:"plan_policy"`
	PlanCellBytes  int64  `json:"plan_cell_bytes"`
	MeasuredTokens int    `json:"measured_tokens"`
	MeasuredCell   int64  `json:"measured_cell_bytes"`
	Assumptions    string `json:"assumptions"`
	Error          string `json:"error,omitempty"`
}

// ComparePlan runs host/plan for preset with the knobs of cfg and sets the
// measured figure from a Boot of the same model.
func ComparePlan(preset, name string, c model.Config, cfg boot.Config, measured BootResult) PlanResult {
	r := PlanResult{Preset: preset, MeasuredTokens: measured.KVTokens, MeasuredCell: measured.KVCellBytes}
	pr, ok := plan.Presets[preset]
	if !ok {
		r.Error = fmt.Sprintf("no plan preset %q", preset)
		return r
	}
	r.Assumptions = fmt.Sprintf("plan's %s preset: %d MiB total, CUDA context %d B assumed, weights params×2 (bf16), KV cells bf16 (2 B/value) as the configurator declares them; "+
		"this CUDA device keeps KV in f32 (4 B/value), so it fits about half the tokens for the same bytes", pr.Name, pr.MemMiB, pr.ContextTP1)
	rep, err := plan.Plan(plan.Input{Name: name, Config: c, Device: preset, TP: 1, ChunkedPrefill: cfg.ChunkedPrefill,
		MaxRunning: cfg.MaxRunning, PageSize: cfg.PageSize, GraphMaxBS: cfg.GraphMaxBS})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.PlanTokens, r.PlanPolicy = rep.Budget.Tokens, rep.Budget.Policy
	if k := rep.Budget.KVConfigurator; k != nil {
		r.PlanCellBytes = k.CellBytes
	}
	return r
}

// PresetFor picks the plan preset matching a GPU name, or "" when none does.
func PresetFor(name string) string {
	for _, p := range []struct{ sub, preset string }{{"H200", "H200"}, {"H100", "H100-80GB"}, {"A100-SXM4-40GB", "A100-40GB"}, {"A100-PCIE-40GB", "A100-40GB"}, {"A100", "A100-80GB"}, {"L40S", "L40S"}, {"4090", "RTX4090"}} {
		if strings.Contains(name, p.sub) {
			return p.preset
		}
	}
	return ""
}
