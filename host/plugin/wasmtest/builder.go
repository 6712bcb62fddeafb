// Package wasmtest assembles WebAssembly modules byte by byte for tests:
// a small module builder (Module), instruction encoders, and the hostile
// plugins of issue 12 (hostile.go) — shapes no toolchain emits on purpose,
// such as an invalid module that writes a global it never declared, so the
// tests do not depend on a compiler's good manners. Tests only: nothing in
// the binary imports it.
package wasmtest

import (
	"bytes"
	"encoding/binary"
	"math"
)

// Value types.
const (
	I32     byte = 0x7f
	I64     byte = 0x7e
	F32     byte = 0x7d
	F64     byte = 0x7c
	FuncRef byte = 0x70
)

// NoMax marks a table or memory without a declared maximum.
const NoMax = -1

// Module is a module under construction. The zero value is empty; Bytes
// encodes it. Sections are emitted in the spec's order.
type Module struct {
	types    [][]byte
	imports  [][]byte
	nImports uint32 // imported functions
	funcs    []uint32
	tables   [][]byte
	mems     [][]byte
	globals  [][]byte
	exports  [][]byte
	elems    [][]byte
	codes    [][]byte
	datas    [][]byte
	passive  bool // a passive data segment: emit the data count section
}

// U32 encodes v as unsigned LEB128.
func U32(v uint32) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// S64 encodes v as signed LEB128.
func S64(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func name(s string) []byte { return append(U32(uint32(len(s))), s...) }

func vec(items [][]byte) []byte {
	return append(U32(uint32(len(items))), bytes.Join(items, nil)...)
}

// Section frames one section body.
func Section(id byte, body []byte) []byte {
	return append(append([]byte{id}, U32(uint32(len(body)))...), body...)
}

// Header is the module preamble.
var Header = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Type returns the index of the function type (params) -> (results),
// adding it if new.
func (m *Module) Type(params, results []byte) uint32 {
	enc := append(append(append([]byte{0x60}, U32(uint32(len(params)))...), params...), U32(uint32(len(results)))...)
	enc = append(enc, results...)
	for i, t := range m.types {
		if bytes.Equal(t, enc) {
			return uint32(i)
		}
	}
	m.types = append(m.types, enc)
	return uint32(len(m.types) - 1)
}

// ImportFunc imports a function; imports must precede Func.
func (m *Module) ImportFunc(module, field string, params, results []byte) uint32 {
	if len(m.funcs) > 0 {
		panic("wasmtest: ImportFunc after Func")
	}
	t := m.Type(params, results)
	m.imports = append(m.imports, append(append(append(name(module), name(field)...), 0x00), U32(t)...))
	m.nImports++
	return m.nImports - 1
}

// Func adds a function with one local per entry of locals and the given
// body (an End is appended) and returns its index.
func (m *Module) Func(params, results, locals []byte, body ...[]byte) uint32 {
	m.funcs = append(m.funcs, m.Type(params, results))
	code := U32(uint32(len(locals)))
	for _, l := range locals {
		code = append(code, 1, l)
	}
	code = append(code, bytes.Join(body, nil)...)
	code = append(code, 0x0b)
	m.codes = append(m.codes, append(U32(uint32(len(code))), code...))
	return m.nImports + uint32(len(m.funcs)) - 1
}

func limits(min uint32, max int64) []byte {
	if max < 0 {
		return append([]byte{0x00}, U32(min)...)
	}
	return append(append([]byte{0x01}, U32(min)...), U32(uint32(max))...)
}

// Memory defines a memory of min pages and max pages (NoMax: none).
func (m *Module) Memory(min uint32, max int64) { m.mems = append(m.mems, limits(min, max)) }

// Table defines a funcref table.
func (m *Module) Table(min uint32, max int64) uint32 {
	m.tables = append(m.tables, append([]byte{FuncRef}, limits(min, max)...))
	return uint32(len(m.tables) - 1)
}

// Global defines a global with a constant initializer and returns its
// index (counting no imported globals: this builder imports none).
func (m *Module) Global(t byte, mutable bool, init []byte) uint32 {
	mut := byte(0)
	if mutable {
		mut = 1
	}
	m.globals = append(m.globals, append(append([]byte{t, mut}, init...), 0x0b))
	return uint32(len(m.globals) - 1)
}

// Export exports a definition: kind 0 function, 1 table, 2 memory, 3 global.
func (m *Module) Export(field string, kind byte, index uint32) {
	m.exports = append(m.exports, append(append(name(field), kind), U32(index)...))
}

// Data adds an active data segment at offset in memory 0.
func (m *Module) Data(offset uint32, b []byte) {
	seg := append([]byte{0x00}, I32Const(int32(offset))...)
	seg = append(seg, 0x0b)
	seg = append(seg, U32(uint32(len(b)))...)
	m.datas = append(m.datas, append(seg, b...))
}

// PassiveData adds a passive data segment (for memory.init) and returns its
// index.
func (m *Module) PassiveData(b []byte) uint32 {
	m.passive = true
	m.datas = append(m.datas, append(append([]byte{0x01}, U32(uint32(len(b)))...), b...))
	return uint32(len(m.datas) - 1)
}

// PassiveElem adds a passive element segment of function references and
// returns its index.
func (m *Module) PassiveElem(funcs ...uint32) uint32 {
	seg := append([]byte{0x01, 0x00}, U32(uint32(len(funcs)))...)
	for _, f := range funcs {
		seg = append(seg, U32(f)...)
	}
	m.elems = append(m.elems, seg)
	return uint32(len(m.elems) - 1)
}

// Bytes encodes the module.
func (m *Module) Bytes() []byte {
	out := append([]byte(nil), Header...)
	add := func(id byte, items [][]byte) {
		if len(items) > 0 {
			out = append(out, Section(id, vec(items))...)
		}
	}
	add(1, m.types)
	add(2, m.imports)
	if len(m.funcs) > 0 {
		fs := make([][]byte, len(m.funcs))
		for i, t := range m.funcs {
			fs[i] = U32(t)
		}
		add(3, fs)
	}
	add(4, m.tables)
	add(5, m.mems)
	add(6, m.globals)
	add(7, m.exports)
	add(9, m.elems)
	if m.passive {
		out = append(out, Section(12, U32(uint32(len(m.datas))))...)
	}
	add(10, m.codes)
	add(11, m.datas)
	return out
}

// Instruction encoders.

// Op is a raw instruction.
func Op(b ...byte) []byte { return b }

func with(op byte, imm []byte) []byte { return append([]byte{op}, imm...) }

func block(op byte, body [][]byte) []byte {
	b := []byte{op, 0x40}
	b = append(b, bytes.Join(body, nil)...)
	return append(b, 0x0b)
}

func I32Const(v int32) []byte { return with(0x41, S64(int64(v))) }
func I64Const(v int64) []byte { return with(0x42, S64(v)) }
func F32Const(v float32) []byte {
	return binary.LittleEndian.AppendUint32([]byte{0x43}, math.Float32bits(v))
}
func LocalGet(i uint32) []byte   { return with(0x20, U32(i)) }
func LocalSet(i uint32) []byte   { return with(0x21, U32(i)) }
func LocalTee(i uint32) []byte   { return with(0x22, U32(i)) }
func GlobalGet(i uint32) []byte  { return with(0x23, U32(i)) }
func GlobalSet(i uint32) []byte  { return with(0x24, U32(i)) }
func Call(f uint32) []byte       { return with(0x10, U32(f)) }
func Br(depth uint32) []byte     { return with(0x0c, U32(depth)) }
func BrIf(depth uint32) []byte   { return with(0x0d, U32(depth)) }
func Loop(body ...[]byte) []byte { return block(0x03, body) }
func Block(body ...[]byte) []byte {
	return block(0x02, body)
}
func If(body ...[]byte) []byte { return block(0x04, body) }

// Memory access with a static offset (natural alignment).
func I32Load(offset uint32) []byte  { return append([]byte{0x28, 2}, U32(offset)...) }
func F32Load(offset uint32) []byte  { return append([]byte{0x2a, 2}, U32(offset)...) }
func I32Store(offset uint32) []byte { return append([]byte{0x36, 2}, U32(offset)...) }
func F32Store(offset uint32) []byte { return append([]byte{0x38, 2}, U32(offset)...) }

var (
	Unreachable = Op(0x00)
	Nop         = Op(0x01)
	Return      = Op(0x0f)
	Drop        = Op(0x1a)
	I32Eqz      = Op(0x45)
	I32GeU      = Op(0x4f)
	F32Gt       = Op(0x5e)
	I32Add      = Op(0x6a)
	I32Sub      = Op(0x6b)
	I32Mul      = Op(0x6c)
	I32Shl      = Op(0x74)
	I64Or       = Op(0x84)
	I64Shl      = Op(0x86)
	I64ExtendU  = Op(0xad)
	MemorySize  = Op(0x3f, 0x00)
	MemoryGrow  = Op(0x40, 0x00)
	MemoryCopy  = Op(0xfc, 10, 0x00, 0x00)
	MemoryFill  = Op(0xfc, 11, 0x00)
	RefNullFunc = Op(0xd0, FuncRef)
)

func MemoryInit(seg uint32) []byte { return append(append([]byte{0xfc, 8}, U32(seg)...), 0x00) }
func TableInit(seg, table uint32) []byte {
	return append(append([]byte{0xfc, 12}, U32(seg)...), U32(table)...)
}
func TableCopy(dst, src uint32) []byte {
	return append(append([]byte{0xfc, 14}, U32(dst)...), U32(src)...)
}
func TableGrow(table uint32) []byte { return append([]byte{0xfc, 15}, U32(table)...) }
func TableFill(table uint32) []byte { return append([]byte{0xfc, 17}, U32(table)...) }
