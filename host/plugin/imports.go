package plugin

import (
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero/api"
)

// ImportError is a plugin refused for an import outside its kind's ABI: a
// configurator may import only functions of module "kvhost" (sdk.Import*)
// and, for Go guests, of wasi_snapshot_preview1; a sampler only the latter
// (C samplers import nothing). Each import must be one the host provides,
// with the host's signature; no plugin imports a memory, table or global
// (it defines its own, which are capped). Checked after compiling, before
// anything is instantiated or run.
type ImportError struct {
	Plugin       string
	Module, Name string
	Problem      string
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("plugin: %s: refused: imports %s.%s: %s", e.Plugin, e.Module, e.Name, e.Problem)
}

// legacyImports maps the host imports of earlier ABI versions, by module,
// name and signature, to that version, so a plugin built against an older
// sdk is refused with an *ABIError before it could be instantiated.
var legacyImports = map[string]int{
	sdk.ImportModule + "." + sdk.ImportDeclarePool + signature(
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI64}, []api.ValueType{api.ValueTypeI32}): 1,
	sdk.ImportModule + "." + sdk.ImportDeclareBuffer + signature(
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32,
			api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}): 1,
}

// checkImports enforces the import rule of m's kind on its compiled code.
func (m *module) checkImports() error {
	for _, f := range m.compiled.ImportedFunctions() {
		mod, fn, _ := f.Import()
		allowed := false
		for _, name := range m.kind.imports {
			allowed = allowed || mod == name
		}
		if !allowed {
			return &ImportError{Plugin: m.name, Module: mod, Name: fn,
				Problem: fmt.Sprintf("a %s may import only %s functions", m.kind.name, strings.Join(m.kind.imports, " and "))}
		}
		host := m.engine.Module(mod)
		if host == nil {
			return &ImportError{Plugin: m.name, Module: mod, Name: fn, Problem: "this host does not provide it"}
		}
		def, ok := host.ExportedFunctionDefinitions()[fn]
		if !ok {
			return &ImportError{Plugin: m.name, Module: mod, Name: fn, Problem: "this host does not provide it"}
		}
		if got, want := signature(f.ParamTypes(), f.ResultTypes()), signature(def.ParamTypes(), def.ResultTypes()); got != want {
			if v, ok := legacyImports[mod+"."+fn+got]; ok {
				// Built against an older sdk: say so, not "signature".
				return &ABIError{Plugin: m.name, Want: sdk.ABIVersion, Found: v}
			}
			return &ImportError{Plugin: m.name, Module: mod, Name: fn, Problem: fmt.Sprintf("signature %s, the host's is %s", got, want)}
		}
	}
	for _, mem := range m.compiled.ImportedMemories() {
		mod, name, _ := mem.Import()
		return &ImportError{Plugin: m.name, Module: mod, Name: name, Problem: "a plugin must define its own memory, not import one"}
	}
	return nil
}
