package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
)

var archModels sync.Map // arch → path of its generated tiny f32 GGUF

// archModel writes gen-model's tiny preset of arch (qwen3moe, deepseek2,
// deepseek3) once per test binary and returns its path.
func archModel(t testing.TB, arch string) string {
	t.Helper()
	if p, ok := archModels.Load(arch); ok {
		return p.(string)
	}
	spec, err := synth.ArchPreset(arch, "tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvhost-engine-arch")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, arch+".gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	archModels.Store(arch, path)
	return path
}
