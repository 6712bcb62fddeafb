package fuel

import (
	"bytes"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// CoreFeatures are the WebAssembly features Instrument decodes, which a
// runtime running instrumented modules enables: WebAssembly 2.0 without
// SIMD (its 0xFD opcodes are refused, not guessed at).
const CoreFeatures = api.CoreFeaturesV2 &^ api.CoreFeatureSIMD

// GlobalName is the export name of the injected fuel counter.
const GlobalName = "kvhost_fuel"

// Section ids (WebAssembly core spec §5.5).
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secElement  = 9
	secCode     = 10
	secData     = 11
	secDataCnt  = 12
	secTag      = 13
	maxSections = 13
)

// sectionOrder ranks non-custom sections in their required order (the tag
// section, 13, sits between memory and global).
var sectionOrder = [14]int{0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 11, 6}

// Options configure Instrument. Zero limits mean "no limit".
type Options struct {
	// Initial is the fuel global's initial value (the host sets it again
	// before every call).
	Initial int64
	// MaxTableElements caps every table and MaxMemoryPages every memory
	// (64 KiB pages): a module whose table or memory declares a larger
	// minimum is refused (*LimitError); its maximum is lowered to the cap
	// (or set, when it declares none), so table.grow or memory.grow past it
	// fails in the guest (-1) instead of growing host memory. Imported
	// tables and memories are refused under a cap.
	MaxTableElements uint32
	MaxMemoryPages   uint32
	// Cost limits, checked before any code is decoded: the module's size,
	// its functions (imported and defined), its code section, any one
	// function body, any one function's locals and any other section's
	// entry count (types, imports, globals, exports, segments).
	MaxModuleBytes   int
	MaxFunctions     uint32
	MaxCodeBytes     int
	MaxBodyBytes     int
	MaxLocals        uint32
	MaxSectionLength uint32
}

// Stats describes one instrumentation.
type Stats struct {
	Functions int    // code bodies instrumented (one entry check each)
	Loops     int    // loop headers instrumented
	Charged   int    // bulk and growth operations charged by their length
	Global    uint32 // index of the fuel global
	Tables    int    // tables whose maximum was lowered or set to the cap
	Memories  int    // memories whose maximum was lowered or set to the cap
	// Exports are the names of the exported functions (a plugin's kind is
	// known from them before anything is compiled).
	Exports []string
}

type section struct {
	id   byte
	body []byte
	off  int // offset of body in the module
}

// maxPages is the most 64 KiB pages a 32-bit memory may declare.
const maxPages = 65536

var header = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// module holds the index spaces of the original module: every index the
// code or a section refers to must lie inside them, so the one index the
// rewrite adds (the fuel global, right after the original globals) can
// never be reached by the guest's own code.
type module struct {
	params    []uint32 // parameter count per type
	funcTypes []uint32 // type index per function, imported first
	imported  uint32   // imported functions
	globals   uint32
	tables    uint32
	mems      uint32
	elems     uint32
	datas     uint32 // from the data count section (0 when absent)
	defined   uint32 // functions the function section declares
	hasCode   bool
	exports   []string // exported function names
}

func (m *module) funcs() uint32 { return uint32(len(m.funcTypes)) }

// Instrument returns a copy of the module wasm with a fuel counter: an
// exported mutable i64 global named GlobalName, initialised to
// opts.Initial, decremented at every function entry and loop header and by
// the length of every bulk memory or table operation and growth (see
// Charge*), trapping (unreachable) once negative. The host sets it before
// each call. A module that refers to a global, function, table, type,
// local, element or data segment beyond the original counts is refused
// before anything is rewritten, so the rewrite never turns an invalid
// module into a valid one.
func Instrument(wasm []byte, opts Options) ([]byte, Stats, error) {
	var st Stats
	if opts.MaxModuleBytes > 0 && len(wasm) > opts.MaxModuleBytes {
		return nil, st, &LimitError{What: "module bytes", Have: int64(len(wasm)), Limit: int64(opts.MaxModuleBytes)}
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], header) {
		return nil, st, &DecodeError{Reason: "not a WebAssembly 1.0 binary (bad magic or version)"}
	}
	secs, err := splitSections(wasm)
	if err != nil {
		return nil, st, err
	}
	m := &module{}
	var tableBody, memoryBody []byte
	hasGlobal, hasExport := false, false
	for _, s := range secs {
		r := &reader{b: s.body, base: s.off}
		switch s.id {
		case secType:
			err = m.scanTypes(r, opts)
		case secImport:
			err = m.scanImports(r, opts)
		case secFunction:
			err = m.scanFunctions(r, opts)
		case secTable:
			var n uint32
			tableBody, n, err = m.scanLimited(r, true, opts.MaxTableElements, opts.MaxSectionLength, &st)
			m.tables += n
		case secMemory:
			var n uint32
			memoryBody, n, err = m.scanLimited(r, false, opts.MaxMemoryPages, opts.MaxSectionLength, &st)
			m.mems += n
		case secTag:
			err = r.fail("exception-handling tags are not supported")
		case secGlobal:
			hasGlobal = true
			err = m.scanGlobals(r, opts)
		case secExport:
			hasExport = true
			err = m.scanExports(r, opts)
		case secStart:
			var f uint32
			if f, err = r.u32(); err == nil && f >= m.funcs() {
				err = r.fail("start function %d: the module has %d functions", f, m.funcs())
			}
		case secElement:
			err = m.scanElements(r, opts)
		case secDataCnt:
			m.datas, err = r.u32()
		case secCode:
			m.hasCode = true
			if opts.MaxCodeBytes > 0 && len(s.body) > opts.MaxCodeBytes {
				err = &LimitError{What: "code bytes", Have: int64(len(s.body)), Limit: int64(opts.MaxCodeBytes)}
			}
		case secData:
			err = m.scanData(r, opts)
		}
		if err == nil && s.id != secCustom && s.id != secCode && !r.eof() {
			err = r.fail("trailing bytes in section %d", s.id)
		}
		if err != nil {
			return nil, st, err
		}
	}
	if !m.hasCode && m.defined > 0 {
		return nil, st, &DecodeError{Reason: fmt.Sprintf("the function section declares %d functions but there is no code section", m.defined)}
	}
	st.Global = m.globals
	st.Exports = m.exports
	out := append(make([]byte, 0, len(wasm)+len(wasm)/4+64), header...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	newGlobal := func(count uint32, prefix []byte) []byte {
		b := appendU32(nil, count+1)
		b = append(b, prefix...)
		b = append(b, 0x7e, 0x01, 0x42) // i64, mutable, i64.const
		b = appendS64(b, opts.Initial)
		return append(b, 0x0b)
	}
	newExport := func(count uint32, prefix []byte) []byte {
		b := appendU32(nil, count+1)
		b = append(b, prefix...)
		b = appendU32(b, uint32(len(GlobalName)))
		b = append(b, GlobalName...)
		b = append(b, 0x03)
		return appendU32(b, st.Global)
	}
	// Missing global or export sections are created just before the first
	// section that must follow them, else before the custom sections that
	// end the module (so a module's last section stays its last: a
	// decoder's verdict on a trailing custom section, such as wazero's on an
	// empty name at the very end, is the same for the output).
	trail := len(secs)
	for trail > 0 && secs[trail-1].id == secCustom {
		trail--
	}
	for i, s := range secs {
		if i == trail {
			if !hasGlobal {
				emit(secGlobal, newGlobal(0, nil))
				hasGlobal = true
			}
			if !hasExport {
				emit(secExport, newExport(0, nil))
				hasExport = true
			}
		}
		if s.id != secCustom {
			if !hasGlobal && sectionOrder[s.id] > sectionOrder[secGlobal] {
				emit(secGlobal, newGlobal(0, nil))
				hasGlobal = true
			}
			if !hasExport && sectionOrder[s.id] > sectionOrder[secExport] {
				emit(secExport, newExport(0, nil))
				hasExport = true
			}
		}
		switch s.id {
		case secTable:
			emit(secTable, tableBody)
		case secMemory:
			emit(secMemory, memoryBody)
		case secGlobal:
			r := &reader{b: s.body, base: s.off}
			n, _ := r.u32() // read in the scan
			emit(secGlobal, newGlobal(n, s.body[r.pos:]))
		case secExport:
			r := &reader{b: s.body, base: s.off}
			n, _ := r.u32()
			emit(secExport, newExport(n, s.body[r.pos:]))
		case secCode:
			body, err := m.rewriteCode(s, opts, &st)
			if err != nil {
				return nil, st, err
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	if !hasGlobal {
		emit(secGlobal, newGlobal(0, nil))
	}
	if !hasExport {
		emit(secExport, newExport(0, nil))
	}
	return out, st, nil
}

// splitSections checks section framing and order.
func splitSections(wasm []byte) ([]section, error) {
	r := &reader{b: wasm, pos: 8}
	var secs []section
	lastRank := -1
	for !r.eof() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		if id > maxSections {
			return nil, r.fail("unknown section id %d", id)
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		off := r.pos
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		if id != secCustom {
			if rank := sectionOrder[id]; rank <= lastRank {
				return nil, &DecodeError{Offset: off, Reason: fmt.Sprintf("section %d out of order or repeated", id)}
			} else {
				lastRank = rank
			}
		}
		secs = append(secs, section{id: id, body: body, off: off})
	}
	return secs, nil
}

// rewriteCode instruments every function body.
func (m *module) rewriteCode(s section, opts Options, st *Stats) ([]byte, error) {
	r := &reader{b: s.body, base: s.off}
	n, err := r.count("function bodies", 0, 1)
	if err != nil {
		return nil, err
	}
	if n != m.defined {
		return nil, r.fail("code section has %d bodies, the function section declares %d", n, m.defined)
	}
	out := appendU32(make([]byte, 0, len(s.body)+int(n)*2*len(fuelCheck(st.Global))), n)
	fc := &funcCode{m: m, global: st.Global, check: fuelCheck(st.Global)}
	for i := range n {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		if opts.MaxBodyBytes > 0 && int64(size) > int64(opts.MaxBodyBytes) {
			return nil, &LimitError{What: fmt.Sprintf("function %d body bytes", m.imported+i), Have: int64(size), Limit: int64(opts.MaxBodyBytes)}
		}
		off := r.pos
		body, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		if err := fc.rewrite(body, s.off+off, m.params[m.funcTypes[m.imported+i]], opts.MaxLocals); err != nil {
			return nil, err
		}
		st.Functions++
		st.Loops += fc.loops
		st.Charged += fc.charged
		out = appendU32(out, uint32(len(fc.out)))
		out = append(out, fc.out...)
	}
	if !r.eof() {
		return nil, r.fail("trailing bytes in the code section")
	}
	return out, nil
}

// Exports lists the names of the functions a module exports, reading only
// its section framing and export section (no limits, no validation): for
// telling a plugin's kind without instrumenting it.
func Exports(wasm []byte) ([]string, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], header) {
		return nil, &DecodeError{Reason: "not a WebAssembly 1.0 binary (bad magic or version)"}
	}
	secs, err := splitSections(wasm)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range secs {
		if s.id != secExport {
			continue
		}
		r := &reader{b: s.body, base: s.off}
		n, err := r.count("exports", 0, 3)
		if err != nil {
			return nil, err
		}
		for range n {
			name, err := r.name()
			if err != nil {
				return nil, err
			}
			kind, err := r.byte()
			if err != nil {
				return nil, err
			}
			if _, err := r.u32(); err != nil {
				return nil, err
			}
			if kind == 0x00 {
				names = append(names, name)
			}
		}
	}
	return names, nil
}
