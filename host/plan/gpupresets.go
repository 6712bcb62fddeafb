package plan

import (
	"fmt"
	"sort"
	"strings"
)

// Preset is a described GPU: nvidia-smi's memory.total, the assumed memory
// the CUDA context (and, for TP > 1, NCCL) takes before the first
// free-memory reading P, and the compute capability (it sizes the cuBLAS
// workspace, device.CublasWorkspaceBytes).
type Preset struct {
	Name       string `json:"name"`
	MemMiB     int64  `json:"memory_total_mib"`
	ContextTP1 int64  `json:"context_bytes_tp1"`
	// ContextTPN is the extra for tp > 1 (NCCL, custom all-reduce).
	ContextTPN   int64 `json:"context_extra_bytes_tpn"`
	ComputeMajor int   `json:"compute_major"`
}

// Assumed overheads. H100-80GB's context is spec V3's: total 81 559 MiB −
// P 84 711 309 312 = 809 500 672 B; the others assume the same per-process
// context. The tp > 1 extra is spec V6's 8×H200 reading less that context
// (150 755 639 296 − 147 312 000 000 − 809 500 672 = 2 634 138 624 B).
const (
	contextTP1 = 809_500_672
	contextTPN = 2_634_138_624
	// LoadOverhead is what weight loading leaves beyond the weights (spec
	// V3: A = P − weights − 20 MiB).
	LoadOverhead = 20 << 20
	// FlashInferWorkspace is SGLANG_FLASHINFER_WORKSPACE_SIZE (spec §4);
	// FlashInferWorkspaceQwen is its size for the Qwen2/Qwen3/Qwen3-VL/MiMo
	// architectures.
	FlashInferWorkspace     = 384 << 20
	FlashInferWorkspaceQwen = 512 << 20
)

// Presets are the described GPUs of --gpu (memory.total as nvidia-smi
// prints it for the SXM/PCIe parts named).
var Presets = map[string]Preset{
	"H100-80GB": {"H100-80GB", 81559, contextTP1, contextTPN, 9},
	"H200":      {"H200", 143771, contextTP1, contextTPN, 9},
	"A100-80GB": {"A100-80GB", 81920, contextTP1, contextTPN, 8},
	"A100-40GB": {"A100-40GB", 40960, contextTP1, contextTPN, 8},
	"L40S":      {"L40S", 46068, contextTP1, contextTPN, 8},
	"RTX4090":   {"RTX4090", 24564, contextTP1, contextTPN, 8},
}

// PresetHelp lists the presets for --help.
func PresetHelp() string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, n := range names {
		p := Presets[n]
		fmt.Fprintf(&sb, "  %-10s total %6d MiB, context %d B (tp>1: +%d B), compute %d.x\n", n, p.MemMiB, p.ContextTP1, p.ContextTPN, p.ComputeMajor)
	}
	return sb.String()
}

// flashInferWorkspace is the attention workspace SGLang allocates for an
// architecture (spec §4).
func flashInferWorkspace(arch string) int64 {
	for _, p := range []string{"Qwen2", "Qwen3", "MiMo"} {
		if strings.HasPrefix(arch, p) {
			return FlashInferWorkspaceQwen
		}
	}
	return FlashInferWorkspace
}
