package fuel

import (
	"context"
	"testing"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/tetratelabs/wazero"
)

// fuzzOptions are limits of the order the plugin runtime uses.
var fuzzOptions = Options{
	Initial: 1 << 20, MaxTableElements: 1 << 16, MaxMemoryPages: 1024,
	MaxModuleBytes: 1 << 20, MaxFunctions: 1 << 12, MaxCodeBytes: 1 << 20,
	MaxBodyBytes: 1 << 16, MaxLocals: 1 << 12, MaxSectionLength: 1 << 12,
}

// FuzzInstrument checks, for any input the instrumenter accepts, that
// Instrument(m) is valid WebAssembly if and only if m is (wazero's
// decoder and validator are the oracle, with the features the plugin
// runtime enables): the rewrite must never turn an invalid module into a
// valid one (issue 12's fuel refill) nor break a valid one. It also checks
// that the output decodes again, up to the export it added, and that
// nothing panics.
func FuzzInstrument(f *testing.F) {
	f.Add(loopModule())
	f.Add(loopModule(sec(6, 1, 0x7f, 0x00, 0x41, 0x05, 0x0b)))
	f.Add([]byte(nil))
	// Seeds stay small (the engine minimizes every new input; the init
	// attacks' 32 KiB segments would make that crawl).
	small := &wasmtest.Module{}
	small.Memory(1, wasmtest.NoMax)
	small.Table(2, wasmtest.NoMax)
	small.PassiveData([]byte{1, 2, 3})
	small.PassiveElem(0, 0)
	small.Export("f", 0, small.Func([]byte{wasmtest.I32}, nil, []byte{wasmtest.I64},
		wasmtest.I32Const(0), wasmtest.I32Const(0), wasmtest.LocalGet(0), wasmtest.MemoryFill,
		wasmtest.I32Const(0), wasmtest.I32Const(0), wasmtest.I32Const(1), wasmtest.MemoryInit(0),
		wasmtest.I32Const(0), wasmtest.I32Const(0), wasmtest.I32Const(2), wasmtest.TableInit(0, 0),
		wasmtest.RefNullFunc, wasmtest.LocalGet(0), wasmtest.TableGrow(0), wasmtest.Drop))
	f.Add(small.Bytes())
	for _, a := range append([]wasmtest.Attack{wasmtest.None}, wasmtest.Attacks...) {
		if a == wasmtest.InitMemory || a == wasmtest.InitTable {
			continue
		}
		f.Add(wasmtest.Sampler("s", a, false))
		f.Add(wasmtest.Configurator("c", a))
	}
	f.Add(wasmtest.EmptyFunctions(3))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(CoreFeatures))
	defer rt.Close(ctx)
	valid := func(wasm []byte) (bool, error) {
		cm, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			return false, err
		}
		_ = cm.Close(ctx)
		return true, nil
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, _, err := Instrument(wasm, fuzzOptions)
		if err != nil {
			return
		}
		in, inErr := valid(wasm)
		got, outErr := valid(out)
		if in != got {
			t.Fatalf("original valid %v (%v), instrumented valid %v (%v)", in, inErr, got, outErr)
		}
		if _, _, err := Instrument(out, fuzzOptions); err == nil {
			t.Fatal("re-instrumenting the output succeeded; want the duplicate export refusal")
		}
	})
}
