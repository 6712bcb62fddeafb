package plugin

import (
	"fmt"

	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// ImportError is a plugin refused for an import outside the ABI: a
// configurator may import only functions of module "kvhost" (sdk.Import*)
// and, for Go guests, of wasi_snapshot_preview1, each one the host
// provides and with the host's signature; it may import no memory (it
// defines its own, capped at Config.MemoryLimitPages). Checked after
// compiling, before anything is instantiated or run.
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

// checkImports enforces the import rule on a compiled module.
func (p *Plugin) checkImports() error {
	provided := map[string]map[string]api.FunctionDefinition{}
	for _, name := range []string{sdk.ImportModule, wasi_snapshot_preview1.ModuleName} {
		if m := p.rt.rt.Module(name); m != nil {
			provided[name] = m.ExportedFunctionDefinitions()
		}
	}
	for _, f := range p.module.ImportedFunctions() {
		mod, fn, _ := f.Import()
		fns, ok := provided[mod]
		if !ok {
			return &ImportError{Plugin: p.name, Module: mod, Name: fn,
				Problem: fmt.Sprintf("a configurator may import only %s and %s functions", sdk.ImportModule, wasi_snapshot_preview1.ModuleName)}
		}
		def, ok := fns[fn]
		if !ok {
			return &ImportError{Plugin: p.name, Module: mod, Name: fn, Problem: "this host does not provide it"}
		}
		if got, want := signature(f.ParamTypes(), f.ResultTypes()), signature(def.ParamTypes(), def.ResultTypes()); got != want {
			if v, ok := legacyImports[mod+"."+fn+got]; ok {
				// Built against an older sdk: say so, not "signature".
				return &ABIError{Plugin: p.name, Want: sdk.ABIVersion, Found: v}
			}
			return &ImportError{Plugin: p.name, Module: mod, Name: fn, Problem: fmt.Sprintf("signature %s, the host's is %s", got, want)}
		}
	}
	for _, mem := range p.module.ImportedMemories() {
		mod, name, _ := mem.Import()
		return &ImportError{Plugin: p.name, Module: mod, Name: name, Problem: "a plugin must define its own memory, not import one"}
	}
	return nil
}
