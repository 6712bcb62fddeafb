package fuel

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// sec frames one section.
func sec(id byte, body ...byte) []byte { return wasmtest.Section(id, body) }

// fn frames one code body.
func fn(body ...byte) []byte { return append(appendU32(nil, uint32(len(body))), body...) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func opts(initial int64) Options { return Options{Initial: initial} }

// loopModule exports sum(n i32) -> i64, adding 0..n-1 in a loop (with a
// nested block, br_if, an i64.const with a 0x03 byte in its immediate and
// a call), and spin(), which loops forever.
func loopModule(extra ...[]byte) []byte {
	types := sec(1, 2,
		0x60, 1, 0x7f, 1, 0x7e, // (i32) -> i64
		0x60, 0, 0) // () -> ()
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
	funcs := sec(3, 3, 0, 1, 1)
	parts := [][]byte{header, types, funcs}
	parts = append(parts, extra...)
	parts = append(parts, exports, code)
	return cat(parts...)
}

func newRuntime(ctx context.Context) wazero.Runtime {
	return wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCoreFeatures(CoreFeatures))
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

func fuelOf(t testing.TB, mod api.Module) api.MutableGlobal {
	t.Helper()
	g, ok := mod.ExportedGlobal(GlobalName).(api.MutableGlobal)
	if !ok {
		t.Fatal("fuel global missing or immutable")
	}
	return g
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
			out, st, err := Instrument(loopModule(tc.extra...), opts(1<<40))
			if err != nil {
				t.Fatal(err)
			}
			if st.Functions != 3 || st.Loops != 2 || st.Global != tc.glob || st.Charged != 0 {
				t.Fatalf("stats %+v", st)
			}
			rt := newRuntime(ctx)
			defer rt.Close(ctx)
			mod := instantiate(t, rt, out)
			g := fuelOf(t, mod)
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
	out, _, err := Instrument(loopModule(), opts(1<<40))
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(ctx)
	defer rt.Close(ctx)
	mod := instantiate(t, rt, out)
	fuelOf(t, mod).Set(1 << 20)
	if _, err := mod.ExportedFunction("spin").Call(ctx); err == nil {
		t.Fatal("spin returned")
	}
}

// bulkModule exports op(n i32) running one operation of length n over a
// memory of pages and an 8192-entry table, plus size() (memory pages).
func bulkModule(pages uint32, ops ...[]byte) []byte {
	m := &wasmtest.Module{}
	m.Memory(pages, wasmtest.NoMax)
	m.Table(wasmtest.TableElements, wasmtest.NoMax)
	seg := m.PassiveData(make([]byte, 1<<16))
	elem := m.PassiveElem(make([]uint32, wasmtest.TableElements)...)
	_ = seg
	_ = elem
	i32 := []byte{wasmtest.I32}
	for i, op := range ops {
		f := m.Func(i32, nil, nil, op)
		m.Export(string(rune('a'+i)), 0, f)
	}
	m.Export("size", 0, m.Func(nil, i32, nil, wasmtest.MemorySize))
	m.Export("tsize", 0, m.Func(nil, i32, nil, wasmtest.Op(0xfc, 16, 0)))
	return m.Bytes()
}

// TestChargesBulkOperations: every operation whose work grows with an
// operand costs fuel in proportion, charged before it runs: a call whose
// fuel cannot pay traps without doing the work.
func TestChargesBulkOperations(t *testing.T) {
	ctx := context.Background()
	n := wasmtest.LocalGet(0)
	z := wasmtest.I32Const(0)
	ops := []struct {
		name string
		code []byte
		per  func(n int64) int64 // fuel for length n, beyond the entry's 1
	}{
		{"memory.fill", cat(z, z, n, wasmtest.MemoryFill), func(n int64) int64 { return n / ChargeBytesPerUnit }},
		{"memory.copy", cat(z, z, n, wasmtest.MemoryCopy), func(n int64) int64 { return n / ChargeBytesPerUnit }},
		{"memory.init", cat(z, z, n, wasmtest.MemoryInit(0)), func(n int64) int64 { return n / ChargeBytesPerUnit }},
		{"table.fill", cat(z, wasmtest.RefNullFunc, n, wasmtest.TableFill(0)), func(n int64) int64 { return n }},
		{"table.copy", cat(z, z, n, wasmtest.TableCopy(0, 0)), func(n int64) int64 { return n }},
		{"table.init", cat(z, z, n, wasmtest.TableInit(0, 0)), func(n int64) int64 { return n }},
		{"table.grow", cat(wasmtest.RefNullFunc, n, wasmtest.TableGrow(0), wasmtest.Drop), func(n int64) int64 { return n }},
		{"memory.grow", cat(n, wasmtest.MemoryGrow, wasmtest.Drop), func(n int64) int64 { return n * ChargePerPage }},
	}
	codes := make([][]byte, len(ops))
	for i, op := range ops {
		codes[i] = op.code
	}
	out, st, err := Instrument(bulkModule(2, codes...), Options{Initial: 1, MaxTableElements: 1 << 14, MaxMemoryPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	if st.Charged != len(ops) || st.Tables != 1 || st.Memories != 1 {
		t.Fatalf("stats %+v, want %d charged operations and both caps applied", st, len(ops))
	}
	rt := newRuntime(ctx)
	defer rt.Close(ctx)
	for i, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			mod := instantiate(t, rt, out)
			defer mod.Close(ctx)
			g := fuelOf(t, mod)
			f := mod.ExportedFunction(string(rune('a' + i)))
			length := int64(4096)
			if op.name == "memory.grow" {
				length = 3
			}
			want := 1 + op.per(length)
			g.Set(1 << 40)
			if _, err := f.Call(ctx, uint64(length)); err != nil {
				t.Fatal(err)
			}
			if used := 1<<40 - int64(g.Get()); used != want {
				t.Fatalf("length %d used %d fuel, want %d", length, used, want)
			}
			// One unit short: the operation must not run.
			g.Set(1 << 40)
			pages, _ := mod.ExportedFunction("size").Call(ctx)
			elems, _ := mod.ExportedFunction("tsize").Call(ctx)
			g.Set(uint64(want - 1))
			if _, err := f.Call(ctx, uint64(length)); err == nil || !strings.Contains(err.Error(), "unreachable") {
				t.Fatalf("underfunded call: %v, want a trap", err)
			}
			g.Set(1 << 40)
			pages2, _ := mod.ExportedFunction("size").Call(ctx)
			elems2, _ := mod.ExportedFunction("tsize").Call(ctx)
			if pages2[0] != pages[0] || elems2[0] != elems[0] {
				t.Fatalf("underfunded call grew memory %d→%d pages or table %d→%d", pages[0], pages2[0], elems[0], elems2[0])
			}
		})
	}
}

// TestCapsTablesAndMemories: a declared maximum over the cap (or none) is
// lowered to the cap, so growth past it fails in the guest; a declared
// minimum over the cap is refused.
func TestCapsTablesAndMemories(t *testing.T) {
	ctx := context.Background()
	grow := func(table bool) []byte {
		m := &wasmtest.Module{}
		m.Memory(1, wasmtest.NoMax)
		m.Table(1, wasmtest.NoMax)
		i32 := []byte{wasmtest.I32}
		if table {
			m.Export("grow", 0, m.Func(i32, i32, nil, wasmtest.RefNullFunc, wasmtest.LocalGet(0), wasmtest.TableGrow(0)))
		} else {
			m.Export("grow", 0, m.Func(i32, i32, nil, wasmtest.LocalGet(0), wasmtest.MemoryGrow))
		}
		return m.Bytes()
	}
	o := Options{Initial: 1 << 40, MaxTableElements: 100, MaxMemoryPages: 4}
	rt := newRuntime(ctx)
	defer rt.Close(ctx)
	for _, table := range []bool{true, false} {
		out, _, err := Instrument(grow(table), o)
		if err != nil {
			t.Fatal(err)
		}
		mod := instantiate(t, rt, out)
		fuelOf(t, mod).Set(1 << 40)
		g := mod.ExportedFunction("grow")
		capacity := uint64(o.MaxTableElements)
		if !table {
			capacity = uint64(o.MaxMemoryPages)
		}
		// Up to the cap succeeds (returns the old size), one past fails.
		if res, err := g.Call(ctx, capacity-1); err != nil || res[0] != 1 {
			t.Fatalf("table %v: grow to the cap: %v %v", table, res, err)
		}
		if res, err := g.Call(ctx, 1); err != nil || int32(res[0]) != -1 {
			t.Fatalf("table %v: grow past the cap: %v %v, want -1", table, res, err)
		}
		mod.Close(ctx)
	}
	big := &wasmtest.Module{}
	big.Table(101, wasmtest.NoMax)
	var le *LimitError
	if _, _, err := Instrument(big.Bytes(), o); !errors.As(err, &le) || le.Have != 101 || le.Limit != 100 {
		t.Fatalf("table minimum over the cap: %v", err)
	}
	bigMem := &wasmtest.Module{}
	bigMem.Memory(5, 5)
	if _, _, err := Instrument(bigMem.Bytes(), o); !errors.As(err, &le) || le.Have != 5 || le.Limit != 4 {
		t.Fatalf("memory minimum over the cap: %v", err)
	}
}

// TestIndicesBeyondTheModuleRefused: the instrumenter adds one global at
// the end of the global index space; any reference beyond the original
// counts is refused, so an invalid module never becomes valid by it. The
// first case is issue 12's fuel refill.
func TestIndicesBeyondTheModuleRefused(t *testing.T) {
	i32 := []byte{wasmtest.I32}
	tests := []struct {
		name, want string
		build      func(m *wasmtest.Module)
	}{
		{"global.set 0 with no globals", "global 0 out of range", func(m *wasmtest.Module) {
			m.Func(nil, nil, nil, wasmtest.Loop(wasmtest.I64Const(1<<62), wasmtest.GlobalSet(0), wasmtest.Br(0)))
		}},
		{"global.get past the globals", "global 1 out of range", func(m *wasmtest.Module) {
			m.Global(wasmtest.I32, false, wasmtest.I32Const(1))
			m.Func(nil, nil, nil, wasmtest.GlobalGet(1), wasmtest.Drop)
		}},
		{"local past the function's", "local 1 out of range", func(m *wasmtest.Module) {
			m.Memory(1, wasmtest.NoMax)
			m.Func(i32, nil, nil, wasmtest.I32Const(0), wasmtest.I32Const(0), wasmtest.LocalGet(1), wasmtest.MemoryFill)
		}},
		{"call past the functions", "function 1 out of range", func(m *wasmtest.Module) {
			m.Func(nil, nil, nil, wasmtest.Call(1))
		}},
		{"table past the tables", "table 0 out of range", func(m *wasmtest.Module) {
			m.Func(nil, i32, nil, wasmtest.Op(0xfc, 16, 0))
		}},
		{"exported global past the globals", "index 0, the module has 0", func(m *wasmtest.Module) {
			m.Export("g", 3, 0)
		}},
		{"global initializer reading itself", "global.get 0 in a constant expression", func(m *wasmtest.Module) {
			m.Global(wasmtest.I64, true, wasmtest.GlobalGet(0))
		}},
		{"data segment past the count", "data segment 1 out of range", func(m *wasmtest.Module) {
			m.Memory(1, wasmtest.NoMax)
			m.PassiveData([]byte{1})
			m.Func(nil, nil, nil, wasmtest.I32Const(0), wasmtest.I32Const(0), wasmtest.I32Const(1), wasmtest.MemoryInit(1))
		}},
		{"block type past the types", "block type 7", func(m *wasmtest.Module) {
			m.Func(nil, nil, nil, wasmtest.Op(0x02, 0x07, 0x0b))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &wasmtest.Module{}
			tc.build(m)
			_, _, err := Instrument(m.Bytes(), opts(7))
			var de *DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *DecodeError containing %q", err, tc.want)
			}
		})
	}
}

// TestLimits: every cost limit refuses a module over it with a
// *LimitError naming what and by how much, before any code is decoded.
func TestLimits(t *testing.T) {
	many := wasmtest.EmptyFunctions(1000)
	locals := &wasmtest.Module{}
	locals.Func(nil, nil, bytes.Repeat([]byte{wasmtest.I32}, 40))
	globals := &wasmtest.Module{}
	for range 600 {
		globals.Global(wasmtest.I32, false, wasmtest.I32Const(0))
	}
	long := &wasmtest.Module{}
	long.Func(nil, nil, nil, bytes.Repeat(wasmtest.Nop, 5000))
	tests := []struct {
		name string
		wasm []byte
		o    Options
		what string
	}{
		{"module bytes", many, Options{MaxModuleBytes: 1000}, "module bytes"},
		{"functions", many, Options{MaxFunctions: 999}, "functions"},
		{"code bytes", many, Options{MaxCodeBytes: 2000}, "code bytes"},
		{"body bytes", long.Bytes(), Options{MaxBodyBytes: 4096}, "function 0 body bytes"},
		{"locals", locals.Bytes(), Options{MaxLocals: 32}, "locals of one function"},
		{"section length", globals.Bytes(), Options{MaxSectionLength: 500}, "globals"},
	}
	for _, tc := range tests {
		_, _, err := Instrument(tc.wasm, tc.o)
		var le *LimitError
		if !errors.As(err, &le) || !strings.HasPrefix(le.What, tc.what) || le.Have <= le.Limit {
			t.Errorf("%s: %v, want a *LimitError for %q", tc.name, err, tc.what)
		}
	}
	// Under the limits the same modules pass.
	if _, _, err := Instrument(many, Options{MaxModuleBytes: 1 << 20, MaxFunctions: 1000, MaxCodeBytes: 1 << 20, MaxSectionLength: 1000}); err != nil {
		t.Fatal(err)
	}
}

func TestRefused(t *testing.T) {
	base := loopModule()
	simd := cat(header, sec(1, 1, 0x60, 0, 0), sec(3, 1, 0), sec(10, 1, 4, 0, 0xfd, 0x0c, 0x0b))
	dupExport := cat(header, sec(6, 1, 0x7e, 0x01, 0x42, 0, 0x0b), sec(7, cat([]byte{1, byte(len(GlobalName))}, []byte(GlobalName), []byte{3, 0})...))
	outOfOrder := cat(header, sec(3, 0), sec(1, 0))
	trailing := cat(header, sec(1, 1, 0x60, 0, 0), sec(3, 1, 0), sec(10, 1, 3, 0, 0x0b, 0x01))
	noCode := cat(header, sec(1, 1, 0x60, 0, 0), sec(3, 1, 0))
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
		{"no code section", "no code section", noCode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(tc.wasm, opts(1))
			var de *DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *DecodeError containing %q", err, tc.want)
			}
		})
	}
}

// TestHostileModulesStopped runs each valid attack of package wasmtest as
// a sampler under a bounded budget: every one traps on fuel.
func TestHostileModulesStopped(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(ctx)
	defer rt.Close(ctx)
	for _, a := range wasmtest.Attacks {
		t.Run(string(a), func(t *testing.T) {
			out, _, err := Instrument(wasmtest.Sampler("evil", a, true), Options{Initial: 1 << 30, MaxTableElements: 1 << 16, MaxMemoryPages: 1024})
			if !a.Valid() {
				if err == nil {
					t.Fatal("invalid attack module instrumented")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mod := instantiate(t, rt, out)
			defer mod.Close(ctx)
			g := fuelOf(t, mod)
			g.Set(1 << 22)
			if _, err := mod.ExportedFunction("kvhost_sample").Call(ctx, 1, 4); err == nil || int64(g.Get()) >= 0 {
				t.Fatalf("attack returned (%v) with fuel %d left", err, int64(g.Get()))
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
	for _, v := range []int64{0, 5, 63, 64, 1 << 32, -1} {
		r := &reader{b: appendS64(nil, v)}
		if got, err := r.s33(); err != nil || got != v {
			t.Fatalf("s33 %d: %d %v", v, got, err)
		}
	}
}
