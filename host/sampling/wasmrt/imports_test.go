package wasmrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// wasmImport is one import of a hand-assembled test module.
type wasmImport struct {
	module, name string
	memory       bool   // a memory (min 1 page) instead of a function
	params       []byte // value types of a function import (0x7f = i32)
	results      []byte
}

// moduleWith assembles a module with just a type and an import section:
// enough to compile, so only the import rule can refuse it.
func moduleWith(imps ...wasmImport) []byte {
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
	return append(out, section(2, append([]byte{byte(len(imps))}, imports...))...)
}

// TestImportRule: a sampler may import only functions of
// wasi_snapshot_preview1 the host provides, with its signatures, and no
// memory. (The C importer plugin, env.peek, is in TestRefusals.)
func TestImportRule(t *testing.T) {
	i32 := byte(0x7f)
	tests := []struct {
		name string
		imp  wasmImport
		want string
	}{
		{"other module", wasmImport{module: "kvhost", name: "log"}, "imports kvhost.log: a sampler may import only wasi_snapshot_preview1 functions"},
		{"unknown wasi", wasmImport{module: "wasi_snapshot_preview1", name: "no_such_call"}, "wasi_snapshot_preview1.no_such_call, which this host does not provide"},
		{"wrong signature", wasmImport{module: "wasi_snapshot_preview1", name: "fd_write", params: []byte{i32}, results: []byte{i32}},
			"imports wasi_snapshot_preview1.fd_write as (i32)->(i32), the host's is (i32,i32,i32,i32)->(i32)"},
		{"memory", wasmImport{module: "env", name: "memory", memory: true}, "imports memory env.memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testRT.Load(context.Background(), "imp", moduleWith(tc.imp))
			var re *RefusedError
			if !errors.As(err, &re) || re.Stage != "imports" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a refusal at imports containing %q", err, tc.want)
			}
		})
	}
	// A well-formed wasi import passes the import rule (and is refused
	// later, for lacking the sampler exports): the rule is not refusing
	// everything.
	ok := wasmImport{module: "wasi_snapshot_preview1", name: "fd_write", params: []byte{i32, i32, i32, i32}, results: []byte{i32}}
	_, err := testRT.Load(context.Background(), "imp", moduleWith(ok))
	var re *RefusedError
	if !errors.As(err, &re) || re.Stage != "exports" {
		t.Fatalf("valid wasi import: %v, want a refusal at exports", err)
	}
}
