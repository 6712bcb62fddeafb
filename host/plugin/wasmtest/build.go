package wasmtest

// This file builds the C sampler plugins for tests: the built-in
// policies (plugins/<name>/<name>.c into host/plugin/builtin/wasm, beside the
// configurators) and the
// hostile test samplers (host/sampling/testdata/c into
// host/sampling/testdata/wasm), by running scripts/build-samplers.sh when
// any output is missing or older than its sources, so go test works on a
// fresh checkout with the toolchain installed
// (scripts/install-wasm-toolchain.sh) and fails with that advice without it.

import (
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing/fstest"
)

var (
	once     sync.Once
	onceErr  error
	rootPath string
)

// Root returns the repository root (the directory holding go.mod):
// testmodels.Root, the one finder the tests share.
func Root() (string, error) { return testmodels.Root() }

// Ensure builds the samplers once per process when stale.
func Ensure() error {
	once.Do(func() { onceErr = ensure() })
	return onceErr
}

// pairs lists (source, output) for every C sampler.
func pairs(root string) ([][2]string, error) {
	var out [][2]string
	srcs, err := filepath.Glob(filepath.Join(root, "plugins", "*", "*.c"))
	if err != nil {
		return nil, err
	}
	for _, s := range srcs {
		name := filepath.Base(filepath.Dir(s))
		if strings.TrimSuffix(filepath.Base(s), ".c") != name {
			continue
		}
		out = append(out, [2]string{s, filepath.Join(root, builtinDir, name+".wasm")})
	}
	tests, err := filepath.Glob(filepath.Join(root, "host/sampling/testdata/c", "*.c"))
	if err != nil {
		return nil, err
	}
	for _, s := range tests {
		out = append(out, [2]string{s, filepath.Join(root, "host/sampling/testdata/wasm", strings.TrimSuffix(filepath.Base(s), ".c")+".wasm")})
	}
	return out, nil
}

func ensure() error {
	root, err := Root()
	if err != nil {
		return err
	}
	rootPath = root
	ps, err := pairs(root)
	if err != nil {
		return err
	}
	header, err := os.Stat(filepath.Join(root, "sdk/sampler/c/kvhost_sampler.h"))
	if err != nil {
		return err
	}
	stale := false
	for _, p := range ps {
		src, err := os.Stat(p[0])
		if err != nil {
			return err
		}
		out, err := os.Stat(p[1])
		newest := src.ModTime()
		if header.ModTime().After(newest) {
			newest = header.ModTime()
		}
		if err != nil || out.ModTime().Before(newest) {
			stale = true
			break
		}
	}
	if !stale {
		return nil
	}
	cmd := exec.Command(filepath.Join(root, "scripts/build-samplers.sh"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("wasmtest: scripts/build-samplers.sh (install the toolchain with scripts/install-wasm-toolchain.sh): %v\n%s", err, out)
	}
	return nil
}

// Builtin returns the bytes of plugins/<name> as built.
func Builtin(name string) ([]byte, error) { return read(builtinDir, name) }

// builtinDir is where the built-in plugins of every kind are built.
const builtinDir = "host/plugin/builtin/wasm"

// BuiltinSamplers returns the built-in sampling policies as built (not as
// embedded when the test binary was compiled, which may predate them), as
// a file system of <name>.wasm files.
func BuiltinSamplers() (fs.FS, error) {
	if err := Ensure(); err != nil {
		return nil, err
	}
	ps, err := pairs(rootPath)
	if err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for _, p := range ps {
		if filepath.Dir(p[1]) != filepath.Join(rootPath, builtinDir) {
			continue
		}
		b, err := os.ReadFile(p[1])
		if err != nil {
			return nil, err
		}
		out[filepath.Base(p[1])] = &fstest.MapFile{Data: b}
	}
	return out, nil
}

// HostileC returns the bytes of host/sampling/testdata/c/<name>.c as built.
func HostileC(name string) ([]byte, error) { return read("host/sampling/testdata/wasm", name) }

func read(dir, name string) ([]byte, error) {
	if err := Ensure(); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(rootPath, dir, name+".wasm"))
}
