package cuda

import (
	"path/filepath"
	"sort"
)

// CublasMajors are the cuBLAS soname majors tried, newest first. Each major
// is its own ABI as far as we know; the declarations used (cublasCreate_v2,
// cublasSetStream_v2, cublasSetWorkspace_v2, cublasGemmEx) have kept their
// prototypes since CUDA 11.0.
var CublasMajors = []int{13, 12, 11}

// LibCandidate is one place to dlopen cuBLAS from: Lt is loaded first (with
// RTLD_GLOBAL) so that cuBLAS's own dependency on it resolves.
type LibCandidate struct {
	Lt, Blas string
	Major    int
	// Why says which rule produced the candidate, for the log.
	Why string
}

// SearchEnv is what the search reads from the machine; the cgo loader fills
// it from the real environment and tests from a table.
type SearchEnv struct {
	// Override is $KVHOST_CUBLAS_DIR (or a flag): a directory tried first.
	Override string
	// Home, VirtualEnv and CondaPrefix locate per-user Python trees.
	Home, VirtualEnv, CondaPrefix string
	// Glob expands a pattern (filepath.Glob on a real machine).
	Glob func(pattern string) []string
}

// CublasCandidates returns, in order: the override directory for each major;
// a plain soname (which honours LD_LIBRARY_PATH and the ldconfig cache); the
// Python wheel layouts (nvidia/cu13/lib for CUDA 13 wheels, nvidia/cublas/lib
// for CUDA 12 and 11 wheels) under every site-packages or dist-packages tree
// of the system, ~/.local, $VIRTUAL_ENV and $CONDA_PREFIX; and finally
// /usr/local/cuda*/lib64. Duplicates are dropped, first occurrence kept.
func CublasCandidates(env SearchEnv) []LibCandidate {
	var out []LibCandidate
	seen := map[string]bool{}
	add := func(dir string, major int, why string) {
		lt, blas := soname("cublasLt", major), soname("cublas", major)
		if dir != "" {
			lt, blas = filepath.Join(dir, lt), filepath.Join(dir, blas)
		}
		if seen[blas] {
			return
		}
		seen[blas] = true
		out = append(out, LibCandidate{Lt: lt, Blas: blas, Major: major, Why: why})
	}
	glob := env.Glob
	if glob == nil {
		glob = func(string) []string { return nil }
	}
	for _, mj := range CublasMajors {
		if env.Override != "" {
			add(env.Override, mj, "override directory")
		}
	}
	for _, mj := range CublasMajors {
		add("", mj, "dynamic loader search path")
	}
	var trees []string
	for _, pat := range []string{
		"/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
		"/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
	} {
		trees = append(trees, sorted(glob(pat))...)
	}
	for _, root := range []string{env.Home + "/.local", env.VirtualEnv, env.CondaPrefix} {
		if root == "" || root == "/.local" {
			continue
		}
		trees = append(trees, sorted(glob(root+"/lib/python3*/site-packages"))...)
	}
	for _, mj := range CublasMajors {
		wheel := "nvidia/cublas/lib"
		if mj >= 13 {
			wheel = "nvidia/cu13/lib"
		}
		for _, t := range trees {
			add(filepath.Join(t, wheel), mj, "python wheel")
		}
	}
	cudaDirs := sorted(glob("/usr/local/cuda*/lib64"))
	for _, mj := range CublasMajors {
		for _, d := range cudaDirs {
			add(d, mj, "CUDA toolkit directory")
		}
	}
	return out
}

func soname(lib string, major int) string {
	return "lib" + lib + ".so." + itoa(major)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
