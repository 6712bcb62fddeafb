package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

//go:embed *.cu *.cuh *.ptx *.fatbin kernels.sum
var files embed.FS

// Arches are the virtual architectures the PTX is generated for.
var Arches = []string{"sm_80", "sm_90"}

// Modules maps each module (one per .cu source) to the kernel entry points
// it defines. The host fetches every one of them at startup.
var Modules = map[string][]string{
	"attention":   {"attention", "decode_attention"},
	"elementwise": {"add_f32", "add_bias_f32", "silu_mul_f32", "f32_to_f16", "f32_to_bf16"},
	"experts":     {"route_f32", "group_experts", "scatter_add_f32"},
	"gather":      {"embedding", "gather_rows_f32"},
	"kv":          {"write_kv", "write_kv_rows"},
	"mamba":       {"mamba_conv", "mamba_ssm_update", "mamba_chunk_scan", "mamba_gated_norm", "relu_sq_f32", "scale_f32", "add_scaled_f32"},
	"matvec":      {"matvec"},
	"matvec_q":    {"matvec_q"},
	"norm":        {"rmsnorm_f32"},
	"pointwise":   {"geglu_tanh_f32", "swiglu_oai_f32", "softcap_f32", "scale_f32"},
	"rope":        {"rope_f32"},
	"sample":      {"log_softmax_f32", "argmax_f32"},
}

// ModuleNames returns the module names in a stable order.
func ModuleNames() []string {
	out := make([]string, 0, len(Modules))
	for m := range Modules {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// PTX returns the PTX text of module for arch ("sm_80" or "sm_90"), without
// a terminating NUL (the loader adds one).
func PTX(module, arch string) ([]byte, error) {
	return read(fmt.Sprintf("%s.%s.ptx", module, arch))
}

// Fatbin returns the fatbin of module: sm_80 and sm_90 cubins and compute_90
// PTX, which the driver picks from by the device's compute capability.
func Fatbin(module string) ([]byte, error) {
	return read(module + ".fatbin")
}

// Source returns a committed source file (a .cu or .cuh) by name.
func Source(name string) ([]byte, error) { return read(name) }

// Manifest returns kernels.sum: the SHA-256 of each source, the nvcc release
// and the flags the artifacts were built with.
func Manifest() ([]byte, error) { return read("kernels.sum") }

func read(name string) ([]byte, error) {
	b, err := fs.ReadFile(files, name)
	if err != nil {
		return nil, fmt.Errorf("kernels/cuda: %w", err)
	}
	return b, nil
}

// Sources lists the committed .cu and .cuh files in order.
func Sources() []string {
	var out []string
	for _, pat := range []string{"*.cu", "*.cuh"} {
		m, _ := fs.Glob(files, pat)
		out = append(out, m...)
	}
	sort.Strings(out)
	return out
}
