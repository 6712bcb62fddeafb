package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/fuel"
)

// wasmImport is one import of a hand-assembled test module.
type wasmImport struct {
	module, name string
	memory       bool   // a memory (min 1 page) instead of a function
	params       []byte // value types of a function import (0x7f = i32)
	results      []byte
}

// moduleWith assembles a module with a type section, the imports and,
// when memPages > 0, a memory of that minimum size: enough to compile, so
// only the import rule or the memory cap can refuse it.
func moduleWith(memPages byte, imps ...wasmImport) []byte {
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, body []byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	var types, imports []byte
	nTypes := 0
	for _, im := range imps {
		imports = append(imports, str(im.module)...)
		imports = append(imports, str(im.name)...)
		if im.memory {
			imports = append(imports, 0x02, 0x00, 0x01)
			continue
		}
		types = append(types, 0x60, byte(len(im.params)))
		types = append(types, im.params...)
		types = append(types, byte(len(im.results)))
		types = append(types, im.results...)
		imports = append(imports, 0x00, byte(nTypes))
		nTypes++
	}
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	out = append(out, section(1, append([]byte{byte(nTypes)}, types...))...)
	out = append(out, section(2, append([]byte{byte(len(imps))}, imports...))...)
	if memPages > 0 {
		out = append(out, section(5, []byte{1, 0x00, memPages})...) // memPages < 128: one LEB128 byte
	}
	return out
}

// TestImportRuleConfigurator: a configurator may import only the kvhost
// host functions and WASI preview 1, as the host provides them, and no
// memory.
func TestImportRuleConfigurator(t *testing.T) {
	t.Parallel()
	i32, i64 := byte(0x7f), byte(0x7e)
	tests := []struct {
		name string
		imp  wasmImport
		want string
	}{
		{"env", wasmImport{module: "env", name: "peek", params: []byte{i32}, results: []byte{i32}}, "imports env.peek: a configurator may import only kvhost and wasi_snapshot_preview1 functions"},
		{"unknown kvhost", wasmImport{module: "kvhost", name: "read_file"}, "imports kvhost.read_file: this host does not provide it"},
		{"unknown wasi", wasmImport{module: "wasi_snapshot_preview1", name: "sock_connect"}, "this host does not provide it"},
		{"kvhost signature", wasmImport{module: "kvhost", name: "set_units", params: []byte{i32, i32, i32}, results: []byte{i32}},
			"imports kvhost.set_units: signature (i32,i32,i32)->(i32), the host's is (i32,i32,i64)->(i32)"},
	}
	for _, tc := range tests {
		_, err := testRT.Load(context.Background(), "imp", moduleWith(0, tc.imp))
		var ie *ImportError
		var re *RefusedError
		if !errors.As(err, &ie) || ie.Plugin != "imp" || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &re) || re.Stage != "imports" {
			t.Errorf("%s: %v, want an *ImportError at stage imports containing %q", tc.name, err, tc.want)
		}
	}
	// An imported memory could not be capped: refused while instrumenting,
	// before anything is compiled.
	_, err := testRT.Load(context.Background(), "imp", moduleWith(0, wasmImport{module: "kvhost", name: "memory", memory: true}))
	var re *RefusedError
	if !errors.As(err, &re) || re.Stage != "instrument" || !strings.Contains(err.Error(), `imports memory "memory": a plugin must define its own memory`) {
		t.Errorf("imported memory: %v", err)
	}
	// The ABI's own imports pass the rule (then fail the handshake for
	// lacking exports): the rule does not refuse everything.
	ok := moduleWith(0,
		wasmImport{module: "kvhost", name: "set_units", params: []byte{i32, i32, i64}, results: []byte{i32}},
		wasmImport{module: "wasi_snapshot_preview1", name: "fd_write", params: []byte{i32, i32, i32, i32}, results: []byte{i32}})
	_, err = testRT.Load(context.Background(), "ok", ok)
	var me *MissingExportError
	if !errors.As(err, &me) {
		t.Fatalf("ABI imports: %v, want a *MissingExportError", err)
	}
}

// TestMemoryCapConfigurable: the cap is the runtime's MemoryLimitPages: a
// module whose minimum memory exceeds it is refused before compiling, the same
// module compiles under a larger cap, and the Go memory bomb dies of "out
// of memory" under a small cap too.
func TestMemoryCapConfigurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	small, err := NewRuntime(ctx, Config{MemoryLimitPages: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close(ctx)
	fat := moduleWith(100)
	var le *fuel.LimitError
	if _, err := small.Load(ctx, "fat", fat); !errors.As(err, &le) || le.Have != 100 || le.Limit != 64 || !strings.Contains(err.Error(), "fat: refused at limits") {
		t.Fatalf("100-page module under a 64-page cap: %v", err)
	}
	if _, err := testRT.Load(ctx, "fat", fat); errors.As(err, new(*MissingExportError)) == false {
		t.Fatalf("100-page module under the default cap: %v, want it to compile (then miss exports)", err)
	}
	p, err := small.Load(ctx, "hostile-membomb", readWasm(t, "hostile-membomb"))
	if err == nil {
		defer p.Close(ctx)
		_, err = p.Configure(ctx, llamaInput(t))
	}
	var trap *TrapError
	if !errors.As(err, &trap) || !strings.Contains(trap.Reason, "out of memory") {
		t.Fatalf("membomb under a 64-page cap: %v", err)
	}
	if err := (Config{MemoryLimitPages: 16}).Validate(); err == nil {
		t.Fatal("a cap below the Go runtime's minimum accepted")
	}
}

func TestRegistryAllowList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	builtin := fstest.MapFS{"mha.wasm": {Data: readWasm(t, "mha")}, "swa.wasm": {Data: readWasm(t, "swa")}}
	dir := t.TempDir()
	files := map[string][]byte{
		"extra": readWasm(t, "mha"),            // a built-in's bytes: trusted under any name
		"mla":   readWasm(t, "mla"),            // not listed
		"fp4":   readWasm(t, "fp4"),            // listed for its name
		"liar":  readWasm(t, "hostile-liar"),   // listed for another name
		"swa":   readWasm(t, "hostile-badabi"), // overrides a built-in name: still checked
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRegistryWith(testRT, builtin, dir, RegistryOptions{AllowSHA256: []string{
		allowlist.Sum(files["fp4"]) + " fp4",
		allowlist.Sum(files["liar"]) + " someone-else",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for _, tc := range []struct {
		name   string
		pinned string
		ok     bool
	}{
		{"mha", "", true}, {"extra", "", true}, {"fp4", "", true},
		{"mla", "", false}, {"liar", "someone-else", false}, {"swa", "", false},
	} {
		_, err := r.Plugin(ctx, tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var na *allowlist.NotAllowedError
		if !errors.As(err, &na) || na.Plugin != tc.name || na.SHA256 != allowlist.Sum(files[tc.name]) || na.PinnedTo != tc.pinned ||
			!strings.Contains(err.Error(), filepath.Join(dir, tc.name+".wasm")) {
			t.Errorf("%s: %v, want an *allowlist.NotAllowedError naming the file", tc.name, err)
		}
	}
	// A refused configurator is skipped by ForArchitecture and reported.
	arch := load(t, "mla").Descriptor().Architectures[0]
	if _, err := r.ForArchitecture(ctx, arch, "bf16"); !errors.Is(err, allowlist.ErrNotAllowed) {
		t.Fatalf("ForArchitecture(%s): %v", arch, err)
	}
	if _, err := NewRegistryWith(testRT, builtin, "", RegistryOptions{AllowSHA256: []string{"123"}}); err == nil {
		t.Fatal("bad allow-list entry accepted")
	}
	// Without a list everything loads as before.
	open, err := NewRegistry(testRT, builtin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	if _, err := open.Plugin(ctx, "mla"); err != nil {
		t.Fatal(err)
	}
}
