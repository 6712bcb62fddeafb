package fuel

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// sec frames one section.
func sec(id byte, body ...byte) []byte {
	return append(append([]byte{id}, appendU32(nil, uint32(len(body)))...), body...)
}

// fn frames one code body.
func fn(body ...byte) []byte { return append(appendU32(nil, uint32(len(body))), body...) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// loopModule exports sum(n i32) -> i64, adding 0..n-1 in a loop (with a
// nested block, br_if, an i64.const with a 0x03 byte in its immediate and
// a call), and spin(), which loops forever.
func loopModule(extra ...[]byte) []byte {
	types := sec(1, 2,
		0x60, 1, 0x7f, 1, 0x7e, // (i32) -> i64
		0x60, 0, 0) // () -> ()
	funcs := sec(3, 3, 0, 1, 1)
	exports := sec(7, cat([]byte{2},
		[]byte{3}, []byte("sum"), []byte{0x00, 0},
		[]byte{4}, []byte("spin"), []byte{0x00, 1})...)
	sum := fn(cat(
		[]byte{1, 2, 0x7e}, // 2 locals i64: acc(1), i(2)
		[]byte{0x02, 0x40}, // block
		[]byte{0x03, 0x40}, // loop
		[]byte{0x20, 2, 0x20, 0, 0xad, 0x59, 0x0d, 1}, // i >= n (i64.ge_s on extended n) br_if 1
		[]byte{0x20, 1, 0x20, 2, 0x7c, 0x21, 1},       // acc += i
		[]byte{0x20, 2, 0x42, 0x01, 0x7c, 0x21, 2},    // i++
		[]byte{0x42, 0x83, 0x03, 0x1a},                // i64.const 387; drop
		[]byte{0x10, 2},                               // call nop
		[]byte{0x0c, 0},                               // br 0
		[]byte{0x0b, 0x0b},                            // end loop, end block
		[]byte{0x20, 1, 0x0b})...)
	spin := fn(0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b)
	nop := fn(0, 0x01, 0x0b)
	code := sec(10, cat([]byte{3}, sum, spin, nop)...)
	funcs = sec(3, 3, 0, 1, 1)
	parts := [][]byte{header, types, funcs}
	parts = append(parts, extra...)
	parts = append(parts, exports, code)
	return cat(parts...)
}

func instantiate(t testing.TB, rt wazero.Runtime, wasm []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func TestInstrumentKeepsSemanticsAndCountsFuel(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		extra [][]byte
		glob  uint32
	}{
		{"no globals", nil, 0},
		{"one defined global", [][]byte{sec(6, 1, 0x7f, 0x00, 0x41, 0x05, 0x0b)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := Instrument(loopModule(tc.extra...), 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			if st.Functions != 3 || st.Loops != 2 || st.Global != tc.glob {
				t.Fatalf("stats %+v", st)
			}
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
			defer rt.Close(ctx)
			mod := instantiate(t, rt, out)
			g, ok := mod.ExportedGlobal(GlobalName).(api.MutableGlobal)
			if !ok {
				t.Fatal("fuel global missing or immutable")
			}
			g.Set(1000)
			res, err := mod.ExportedFunction("sum").Call(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if res[0] != 45 {
				t.Fatalf("sum(10) = %d", res[0])
			}
			// 1 entry + 11 loop headers + 10 calls to nop.
			if used := 1000 - int64(g.Get()); used != 22 {
				t.Fatalf("used %d fuel, want 22", used)
			}
			g.Set(15)
			if _, err := mod.ExportedFunction("sum").Call(ctx, 10); err == nil || !strings.Contains(err.Error(), "unreachable") {
				t.Fatalf("out of fuel: %v", err)
			}
			if int64(g.Get()) >= 0 {
				t.Fatalf("fuel %d after the trap, want negative", int64(g.Get()))
			}
		})
	}
}

func TestInfiniteLoopTraps(t *testing.T) {
	ctx := context.Background()
	out, _, err := Instrument(loopModule(), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	mod := instantiate(t, rt, out)
	mod.ExportedGlobal(GlobalName).(api.MutableGlobal).Set(1 << 20)
	if _, err := mod.ExportedFunction("spin").Call(ctx); err == nil {
		t.Fatal("spin returned")
	}
}

func TestRefused(t *testing.T) {
	base := loopModule()
	simd := cat(header, sec(1, 1, 0x60, 0, 0), sec(3, 1, 0), sec(10, 1, 4, 0, 0xfd, 0x0c, 0x0b))
	dupExport := cat(header, sec(6, 1, 0x7e, 0x01, 0x42, 0, 0x0b), sec(7, cat([]byte{1, byte(len(GlobalName))}, []byte(GlobalName), []byte{3, 0})...))
	outOfOrder := cat(header, sec(3, 0), sec(1, 0))
	trailing := cat(header, sec(1, 1, 0x60, 0, 0), sec(3, 1, 0), sec(10, 1, 3, 0, 0x0b, 0x01))
	tests := []struct {
		name, want string
		wasm       []byte
	}{
		{"empty", "magic", nil},
		{"bad version", "magic", []byte{0, 'a', 's', 'm', 2, 0, 0, 0}},
		{"truncated", "past the end", base[:len(base)-3]},
		{"simd", "SIMD", simd},
		{"existing export", "already exports", dupExport},
		{"out of order", "out of order", outOfOrder},
		{"bytes after end", "after the function's final end", trailing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(tc.wasm, 1)
			var de *DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *DecodeError containing %q", err, tc.want)
			}
		})
	}
}

func TestLEB(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, 1 << 40, -(1 << 62)} {
		b := appendS64(nil, v)
		r := &reader{b: b}
		if err := r.skipSigned(64); err != nil || r.pos != len(b) {
			t.Fatalf("%d: %v pos %d len %d", v, err, r.pos, len(b))
		}
		// decode to check the value
		var got int64
		var shift uint
		for i, c := range b {
			got |= int64(c&0x7f) << shift
			shift += 7
			if i == len(b)-1 && c&0x40 != 0 && shift < 64 {
				got |= -1 << shift
			}
		}
		if got != v {
			t.Fatalf("appendS64(%d) decodes to %d", v, got)
		}
	}
	for _, v := range []uint32{0, 127, 128, 1<<32 - 1} {
		r := &reader{b: appendU32(nil, v)}
		if got, err := r.u32(); err != nil || got != v {
			t.Fatalf("u32 %d: %d %v", v, got, err)
		}
	}
}

func FuzzInstrument(f *testing.F) {
	f.Add(loopModule())
	f.Add(loopModule(sec(6, 1, 0x7f, 0x00, 0x41, 0x05, 0x0b)))
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, _, err := Instrument(wasm, 7)
		if err != nil {
			return
		}
		// The output must itself decode, up to the export it added.
		if _, _, err := Instrument(out, 7); err == nil || !strings.Contains(err.Error(), "already exports") {
			t.Fatalf("re-instrumenting: %v (want the duplicate export refusal)", err)
		}
	})
}
