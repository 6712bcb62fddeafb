package fuel

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// BenchmarkLoop runs sum(n) (a tight loop of n iterations with one call
// each) three ways: plain, fuel-instrumented, and plain on a runtime with
// close-on-context-done (wazero's own termination checks). ns/iter is the
// cost of one loop iteration.
func BenchmarkLoop(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	instrumented, _, err := Instrument(loopModule(), opts(1<<62))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name   string
		wasm   []byte
		checks bool
	}{
		{"plain", loopModule(), false},
		{"fuel", instrumented, false},
		{"context-checks", loopModule(), true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(c.checks))
			defer rt.Close(ctx)
			mod := instantiate(b, rt, c.wasm)
			fn := mod.ExportedFunction("sum")
			g, _ := mod.ExportedGlobal(GlobalName).(api.MutableGlobal)
			stack := make([]uint64, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if g != nil {
					g.Set(4 * n)
				}
				stack[0] = n
				if err := fn.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/iter")
		})
	}
}

// BenchmarkInstrument measures the rewrite of a plugin-sized module.
func BenchmarkInstrument(b *testing.B) {
	wasm := loopModule()
	b.SetBytes(int64(len(wasm)))
	for range b.N {
		if _, _, err := Instrument(wasm, fuzzOptions); err != nil {
			b.Fatal(err)
		}
	}
}
